"""Running the arena: :mod:`.launch` (``posenc arena run``: a run from start to report),
:mod:`.context` (a run's directory, units and trained models), :mod:`.training` (the
resumable training loop), :mod:`.presets` (sizes and budgets), :mod:`.distributed`
(torchrun processes), :mod:`.threads` (``--threads``) and :mod:`.progress` (bars, the count
of units done and its JSON records)."""
