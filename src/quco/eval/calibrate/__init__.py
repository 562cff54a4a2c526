"""Choosing thresholds: searching a method's threshold on a calibration split (`search`), and exactly from recorded
runs where a replay suffices (`exact`)."""
