"""Measures of dialogues: metrics and prices, and a judge model's yes/no analysis."""
