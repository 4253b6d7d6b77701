"""Who may call, and what: authentication by key or JWT (`auth`), keys kept in the database
(`keys`), access policies that widen per-owner isolation (`access`), per-principal quotas
(`quotas`) and usage over time (`usage`), and which addresses a URL taken from a request may reach (`netguard`)."""
