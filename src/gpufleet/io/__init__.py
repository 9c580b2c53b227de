"""Reading specs from files: YAML parsing, then the model's validation."""
