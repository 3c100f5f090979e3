"""Fit the analytic (roofline) model's efficiency factors to a measured GPU profile.

    python -m bench.calibrate --measured PROFILE [--arch A] [--hardware H] [--dtype D] [--out FILE] [--json]

Builds the roofline estimate of the same architecture on the same (n, context) grid, fits the
achieved memory bandwidth (and the fixed per-layer overhead, where the data separates them) with
`profiler.calibration.fit_efficiency`, and prints the per-layer error of the estimate before and after
the fit, the other reading of the same data (bandwidth as modelled, overhead fitted: usually the
better one for eager PyTorch, whose kernel launches make batch-1 decoding host-bound), and the
`ppsd profile --analytic` flags that reproduce the calibrated estimate.

--arch defaults to the measured model's shape when it is a random-weight model (random:ARCH); when
the measured model has fewer layers than the architecture (random:ARCH?layers=N) the estimate uses
the measured layer count. --hardware defaults to the table entry matching the measured device name.
Torch-free. Bad input: one line, exit 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from ppsd.errors import UserError


def hardware_key_for(device_name: str) -> str | None:
    """The hardware-table key of a CUDA device name (torch.cuda.get_device_name), or None."""
    d = (device_name or "").lower()
    for needle, key in (("h200", "h200"), ("h100", "h100-sxm"), ("a100", "a100-80gb"), ("3090", "rtx-3090")):
        if needle in d:
            return key
    if "l4" in d.replace("-", " ").split():
        return "l4"
    return None


def arch_for(measured, arch: str | None):
    """(ArchShape with the measured layer count, note or None)."""
    from ppsd.archs import resolve_arch

    spec = arch
    if spec is None:
        mid = measured.model_id
        if not mid.startswith("random:"):
            raise UserError(f"the measured model {mid!r} is not a random:ARCH model, so its shape is unknown here",
                            "give --arch (a built-in name or a config.json path)")
        spec = mid
    spec = spec.removeprefix("random:").partition("?")[0]
    shape = resolve_arch(spec)
    note = None
    if measured.num_layers != shape.num_layers:
        if measured.num_layers > shape.num_layers:
            raise UserError(f"the measured profile has {measured.num_layers} layers, more than {shape.name}'s "
                            f"{shape.num_layers}", "give the architecture that was measured")
        note = f"{shape.name} cut to the measured {measured.num_layers} layers (of {shape.num_layers})"
        shape = dataclasses.replace(shape, num_layers=measured.num_layers)
    return shape, note


def calibrate(measured_dir, arch: str | None = None, hardware: str | None = None, dtype: str | None = None) -> dict:
    """Everything the report prints, as one JSON-able dict."""
    from profiler.calibration import fit_efficiency
    from profiler.estimated_profile import analytic_profile_meta
    from profiler.hardware import normalize_dtype, resolve_hardware
    from profiler.roofline import layer_bytes
    from ppsd.profile import load_profile
    from ppsd.statistics import mape, percent_error

    meas = load_profile(measured_dir)
    if meas.kind != "measured":
        raise UserError(f"{measured_dir} is an {meas.kind} profile, not a measurement",
                        "give a profile written by `ppsd profile --device cuda`")
    if hardware is None:
        hardware = hardware_key_for(meas.device_name)
        if hardware is None:
            raise UserError(f"no hardware-table entry matches the measured device {meas.device_name!r}",
                            "give --hardware (see `ppsd profile --help`)")
    hw = resolve_hardware(hardware)
    shape, note = arch_for(meas, arch)
    dtype = normalize_dtype(dtype or str(meas.meta["model"].get("dtype") or "bf16"))
    meta = analytic_profile_meta(shape, hw, dtype, None, n_values=meas.n_values, context_values=meas.context_values,
                                 gpu_count=1)
    fit = fit_efficiency(meta, meas)
    # The other reading, scored over the same points: bandwidth efficiency as modelled, overhead fitted.
    roof = meta["estimate"]["roofline"]
    bw = roof["bandwidth_bps"] * roof["bandwidth_efficiency"]
    alt_oh = fit["alternative"]["overhead_ms_per_layer"]
    errs = []
    for i, n in enumerate(meas.n_values):
        for j, c in enumerate(meas.context_values):
            if meta["estimate"]["layer_bound"][i][j] != "memory":
                continue
            pred = layer_bytes(shape, n, c, roof["dtype_bytes"]) / bw * 1e3 + alt_oh
            errs += [percent_error(pred, meas.layer_ms(l, n, c)) for l in range(meas.num_layers)]
    fit["alternative"]["mape_pct"] = mape(errs)
    kernels = fit["kernels_per_layer"]
    fit["alternative"]["launch_us"] = alt_oh / kernels * 1e3
    use_alt = fit["alternative"]["mape_pct"] is not None and fit["alternative"]["mape_pct"] < fit["mape_pct_after"]
    eff = fit["alternative"]["bandwidth_efficiency"] if use_alt else fit["bandwidth_efficiency"]
    launch = fit["alternative"]["launch_us"] if use_alt else fit["launch_us"]
    arch_arg = shape.name if shape.source == "builtin" else shape.source
    fit.update({
        "arch": shape.name, "arch_note": note, "hardware": hw.key, "dtype": dtype,
        "estimated_step_ms": meta["latency"]["whole_step"]["median_ms"],
        "measured_step_ms": (meas.latency.get("whole_step") or {}).get("median_ms"),
        "recommended": {"reading": "alternative (overhead fitted)" if use_alt else "fitted",
                        "bandwidth_efficiency": round(eff, 4), "launch_us": round(launch, 3),
                        "command": (f"ppsd profile --analytic --arch {arch_arg} --hardware {hw.key} --dtype {dtype} "
                                    f"--bandwidth-efficiency {min(eff, 1.0):.4f} --launch-us {launch:.3f} --out DIR")},
    })
    return fit


def format_report(fit: dict) -> str:
    lines = [f"calibration of the roofline for {fit['arch']} ({fit['dtype']}) on {fit['hardware']} "
             f"against {fit['measured_device']} ({fit['measured_profile']})"]
    if fit.get("arch_note"):
        lines.append(f"  note: {fit['arch_note']}")
    at = fit["at"]
    lines.append(f"per-layer time at n={at['n']}, context {at['context']} (ms; error = estimate vs measured):")
    lines.append(f"  {'layer':>5} {'measured':>9} {'estimate':>9} {'err %':>8} {'fitted':>9} {'err %':>8}")
    for r in fit["per_layer"]:
        lines.append(f"  {r['layer']:>5} {r['measured_ms']:9.4f} {r['estimated_ms']:9.4f} {r['rel_err_pct']:8.1f} "
                     f"{r['fitted_ms']:9.4f} {r['fitted_rel_err_pct']:8.1f}")
    alt = fit["alternative"]
    lines.append(f"MAPE over {fit['points']} (layer, n, context) points: before {fit['mape_pct_before']:.1f}%, "
                 f"after {fit['mape_pct_after']:.1f}% ({fit['method']}: bandwidth efficiency "
                 f"{fit['bandwidth_efficiency']:.3f}, overhead {fit['overhead_ms_per_layer']:.4f} ms/layer); "
                 f"other reading {alt['mape_pct']:.1f}% (efficiency {alt['bandwidth_efficiency']:.2f} held, "
                 f"overhead {alt['overhead_ms_per_layer']:.4f} ms/layer = {alt['launch_us']:.1f} µs × "
                 f"{fit['kernels_per_layer']} kernels)")
    h = fit["head"]
    if h.get("rel_err_pct") is not None:
        lines.append(f"head (norm + LM head, n=1): measured {h['measured_ms']:.4f} ms, estimate {h['estimated_ms']:.4f} ms "
                     f"({h['rel_err_pct']:+.1f}%)")
    if fit.get("measured_step_ms"):
        lines.append(f"whole step: measured {fit['measured_step_ms']:.3f} ms, estimate {fit['estimated_step_ms']:.3f} ms")
    rec = fit["recommended"]
    lines.append(f"calibrated estimate ({rec['reading']}): {rec['command']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--measured", required=True, metavar="PROFILE", help="measured GPU profile folder")
    ap.add_argument("--arch", help="built-in architecture or config.json (default: the measured random:ARCH)")
    ap.add_argument("--hardware", help="hardware-table key (default: matched from the measured device name)")
    ap.add_argument("--dtype", help="default: the measured profile's dtype")
    ap.add_argument("--out", metavar="FILE", help="also write the fit as JSON")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the report")
    args = ap.parse_args(argv)
    try:
        fit = calibrate(args.measured, args.arch, args.hardware, args.dtype)
    except UserError as exc:
        print(f"calibrate: error: {exc}", file=sys.stderr)
        return 2
    if args.out:
        from ppsd.paths import atomic_write_json

        atomic_write_json(Path(args.out), fit)
    print(json.dumps(fit, indent=1) if args.json else format_report(fit))
    return 0


if __name__ == "__main__":
    sys.exit(main())
