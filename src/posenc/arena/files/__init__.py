"""The files of a run directory: :mod:`.atomic` writes JSON, text and bytes whole or not at
all (standard library only); :mod:`.checkpoints` saves and loads model weights and training
checkpoints (safetensors and torch). This package imports neither, so a module that writes
JSON never loads safetensors."""
