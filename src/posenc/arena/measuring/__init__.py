"""What the experiments measure with: :mod:`.evaluate` (losses and accuracies),
:mod:`.language_model` (the byte-level language model several experiments share),
:mod:`.hf_probe` (a Hugging Face model on the key-value task) and :mod:`.trained`
(a finished run's text models, loaded back)."""
