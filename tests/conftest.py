import os

import pytest
import torch
from hypothesis import settings

# Property tests: deterministic in CI, a few more examples locally.
settings.register_profile("ci", max_examples=30, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=50, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

torch.set_num_threads(1)  # two xdist workers on two cores


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
