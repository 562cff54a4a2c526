"""The command line of evaluation (`quco eval`, `summary`, `compare`, `report`, `results`, `calibrate`, `gate`).
Only the top-level CLI imports this package."""
