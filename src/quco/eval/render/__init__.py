"""Rendering: a run's report, the results tables and figures, the gate's frontier; one stylesheet for every page."""
