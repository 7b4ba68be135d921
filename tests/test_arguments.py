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
    check_size,
    check_str,
    check_values,
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
    with pytest.raises(TypeError, match=r"dtype must be a floating torch\.dtype, got None"):
        check_dtype("dtype", None)
    with pytest.raises(TypeError, match=r"dtype must be a floating torch\.dtype, got torch\.int64"):
        check_dtype("dtype", torch.int64)
    with pytest.raises(TypeError, match=r"dtype must be a torch\.dtype, got 'float32'"):
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


def test_check_str_takes_any_text_and_nothing_else():
    check_str("name", "")
    check_str("name", "any label")
    for value in (None, 1, b"positions"):
        with pytest.raises(TypeError, match="name must be a str, got"):
            check_str("name", value)


def test_check_size_is_check_int_except_for_a_traced_symbolic_size():
    check_size("seq_len", 0)
    with pytest.raises(ValueError, match="seq_len must be >= 0, got -1"):
        check_size("seq_len", -1)
    with pytest.raises(TypeError, match="seq_len must be an int, got bool"):
        check_size("seq_len", True)
    with pytest.raises(ValueError, match="batch must be >= 1"):
        check_size("batch", 0, minimum=1)

    # torch.export (non-strict) hands posenc a SymInt for a dynamic length: it passes
    class Length(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            check_size("seq_len", x.shape[1])
            return x * 2

    dim = torch.export.Dim("seq", min=2, max=64)
    exported = torch.export.export(
        Length(), (torch.ones(1, 4),), dynamic_shapes=({1: dim},), strict=False
    )
    torch.testing.assert_close(exported.module()(torch.ones(1, 7)), torch.full((1, 7), 2.0))


def test_check_values_refuses_meta_by_name_only():
    check_values("input_ids", torch.zeros(2, dtype=torch.long), "multimodal")
    with pytest.raises(ValueError, match=r"input_ids is on the meta device.*multimodal reads"):
        check_values("input_ids", torch.zeros(2, device="meta"), "multimodal")
