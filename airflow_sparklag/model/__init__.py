"""The model: report, verdict and result types at the bottom of the package; they import
nothing else of ours (the import contracts in pyproject.toml keep it so)."""
