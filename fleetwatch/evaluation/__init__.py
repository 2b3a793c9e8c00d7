"""Scoring detections against labels: SKAB's outlier and changepoint (NAB-style) protocols."""
