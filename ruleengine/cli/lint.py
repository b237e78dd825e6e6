"""Rule-author commands: verify, check, rule-codes, convert."""
