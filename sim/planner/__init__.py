"""What to run: plans resolved (`resolve`), swept (`sweep_spec`), priced by closed forms
(`closed_forms`), explained (`breakdown`, `draft_cost`), compared across exit heads (`heads`) and
devices (`gpus`), and one verdict (`verdict`)."""
