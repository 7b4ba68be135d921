"""What the arena's models read: :mod:`.corpus` (the text), :mod:`.batches` (byte-level
language-model batches) and :mod:`.tasks` (the synthetic copy, reverse and key-value
tasks)."""
