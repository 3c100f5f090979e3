"""The profile contract: the one interface between the profiler and everything else (torch-free).

A profile folder (`files.py`: its files and columns; `schema.py`: profile.json's typed, versioned schema,
the one place every value is checked) loads into a `Profile` (`profile.py`: the latency tables, machine
facts, acceptance tables) whose optional blocks the simulator prices come as typed parts (`parts.py`:
`BatchTables`, `ControlPlane`, `DrawCosts`, `PassOverheads`). `folder.py` reads and writes folders. It lives in `ppsd/` beside the other shared
vocabularies (errors, exit heads, paths) so that `sim/`, `dashboard/`, `runtime/` and `profiler/`
all depend on it and it on none of them.
"""

from ppsd.profile.files import (ACCEPTANCE_COLUMNS, ACCEPTANCE_FILE, GENERATIONS_FILE, MEASURED_N_VALUES, PROFILE_FILE,
                                READABLE_VERSIONS, SAMPLED_BETA_DECIMALS, SAMPLED_COLUMNS, SAMPLED_FILE,
                                SAMPLED_OPTIONAL, SCHEMA_VERSION, SHARED_HEAD, TEMPERATURE_TOL, malformed,
                                read_acceptance, read_sampled)
from ppsd.profile.folder import add_latency_block, load_profile, save_profile, write_acceptance_view
from ppsd.profile.parts import BatchTables, ControlPlane, DrawCosts, PassOverheads
from ppsd.profile.profile import Profile
from ppsd.profile.tables import StatTable, interp

__all__ = ["add_latency_block", "ACCEPTANCE_COLUMNS", "ACCEPTANCE_FILE", "GENERATIONS_FILE", "MEASURED_N_VALUES", "PROFILE_FILE",
           "READABLE_VERSIONS", "SAMPLED_BETA_DECIMALS", "SAMPLED_COLUMNS", "SAMPLED_FILE", "SAMPLED_OPTIONAL",
           "SCHEMA_VERSION", "SHARED_HEAD", "TEMPERATURE_TOL", "BatchTables", "ControlPlane", "DrawCosts", "PassOverheads", "Profile",
           "StatTable", "interp", "load_profile", "malformed", "read_acceptance", "read_sampled", "save_profile",
           "write_acceptance_view"]
