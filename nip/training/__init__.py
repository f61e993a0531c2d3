"""Training agents on their own dialogues: Expert Iteration and MALT."""
