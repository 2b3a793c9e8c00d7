"""The fleet model and its life cycle: devices' statistics pooled per scope (PCA moments,
tails), published to the scorer, and kept in MLflow (registry, training runs)."""
