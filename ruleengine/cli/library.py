"""Rule library commands: rules list."""
