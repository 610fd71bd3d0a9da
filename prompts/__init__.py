"""Prompt templates (this folder ships inside the wheel as dcode.prompts)."""
