"""autotune: find the fastest good training configuration for a PyTorch Lightning model.

``autotune search model.py`` runs an Optuna study whose trials are short, real, isolated Lightning
training jobs, scores each on throughput and convergence, and exports the recommendation as a
LightningCLI YAML. Importing this package is cheap: torch, Lightning and Optuna load lazily.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
