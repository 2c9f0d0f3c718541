"""Fine-tuning as a method: the chain's ``finetune`` step (recovery wherever a chain puts it)."""
