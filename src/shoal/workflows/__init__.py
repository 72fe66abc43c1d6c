"""Built-in workflows and the prompts of their roles."""
