"""HTTP plumbing both sides share: capped, strictly decoded replies; capped, timed request bodies."""
