"""The gate's numbers: per-question signals and outcomes of recorded runs (`data`), the exact frontier of
every signal and the random and oracle bounds (`frontier`), and gates fitted on the calibration split (`fit`)."""
