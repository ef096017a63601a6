"""Per-principal governance: the limits and budgets a request is admitted under."""
