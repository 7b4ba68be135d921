"""The shared argument checks of posenc.arguments: each refuses by name, with the right error
type, and accepts what it documents."""

import pytest
import torch

from posenc.arguments import (
    check_base,
    check_callable,
    check_devices,
    check_dtype,
    check_ints,
    check_movable,
)


def test_check_ints_takes_an_ordered_sequence_of_ints():
    check_ints("grid", (2, 3), lengths=(2,))
    check_ints("grid", [2, 3], lengths=(2,))
    with pytest.raises(TypeError, match="grid must be a tuple of ints, got set"):
        check_ints("grid", {2, 3}, lengths=(2,))
    with pytest.raises(TypeError, match="grid must be a tuple of ints, got str"):
        check_ints("grid", "23", lengths=(2,))
    with pytest.raises(ValueError, match="grid must hold 2 ints, got 3"):
        check_ints("grid", (1, 2, 3), lengths=(2,))
    with pytest.raises(TypeError, match="grid must hold ints, got bool"):
        check_ints("grid", (True, 2), lengths=(2,))
    with pytest.raises(ValueError, match=r"grid must hold ints in \[1, "):
        check_ints("grid", (0, 2), lengths=(2,))


def test_check_base_is_a_number_above_one():
    check_base("base", 10000)
    with pytest.raises(ValueError, match="base must be > 1"):
        check_base("base", 1.0)
    with pytest.raises(TypeError, match="base must be a number"):
        check_base("base", "1e4")


def test_check_callable():
    check_callable("kernel", len)
    with pytest.raises(TypeError, match="kernel must be callable, got NoneType"):
        check_callable("kernel", None)


def test_check_dtype_refuses_none_and_non_floating():
    check_dtype("dtype", torch.bfloat16)
    check_dtype("dtype", torch.int64, floating=False)
    with pytest.raises(TypeError, match="dtype must be a floating torch.dtype, got None"):
        check_dtype("dtype", None)
    with pytest.raises(TypeError, match="dtype must be a floating torch.dtype, got torch.int64"):
        check_dtype("dtype", torch.int64)
    with pytest.raises(TypeError, match="dtype must be a torch.dtype, got 'float32'"):
        check_dtype("dtype", "float32", floating=False)


def test_check_devices_names_every_tensor():
    x, y = torch.ones(2), torch.ones(2)
    assert check_devices(x=x, y=y) == torch.device("cpu")
    with pytest.raises(ValueError, match="x, y and z must be on one device, got x on cpu, y on"):
        check_devices(x=x, y=y, z=torch.ones(2, device="meta"))


def test_check_movable_refuses_meta_towards_real_devices_only():
    meta = torch.ones(2, device="meta")
    check_movable("inv_freq", meta, torch.device("meta"))
    check_movable("inv_freq", torch.ones(2), torch.device("meta"))
    with pytest.raises(ValueError, match="inv_freq is on the meta device"):
        check_movable("inv_freq", meta, torch.device("cpu"))
