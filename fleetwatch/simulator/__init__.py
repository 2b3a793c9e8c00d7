"""The device fleet simulator and the evaluation of alerts against its ground truth."""
