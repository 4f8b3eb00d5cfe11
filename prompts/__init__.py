"""The prompt templates (Jinja2, ``*.md``), shipped as package data so that ``importlib.resources`` finds them
in a wheel install as well as in a checkout. Rendered by ``core.prompts.PromptLibrary``."""
