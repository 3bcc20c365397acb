"""The examples' ``--numeric-encoding`` and ``--column-gain``: a numeric cell's value token, torch and JAX alike,
against a plain numpy reference on hand-built cells."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tests.examples.launch import EXAMPLES

sys.path.insert(0, str(EXAMPLES))
import options  # noqa: E402
import rt_jax  # noqa: E402
import rt_torch  # noqa: E402
import torch  # noqa: E402

TABLE_DIM, TEXT_DIM, D = 8, 4, 16
# four numeric cells of one sequence: (column, z-scored value)
CELLS = [(0, 0.0), (0, 1.5), (1, 0.0), (1, 1.5)]


def _batch() -> dict[str, np.ndarray]:
    s = len(CELLS)
    return {"semantic_types": np.zeros((1, s), np.uint8),
            "column_ids": np.array([[c for c, _ in CELLS]], np.int64),
            "numeric_values": np.array([[v for _, v in CELLS]], np.float32),
            "bool_values": np.zeros((1, s), np.uint8),
            "timestamp_values": np.zeros((1, s, 15), np.float32),
            "categorical_embed_ids": np.zeros((1, s), np.int64),
            "text_embed_ids": np.zeros((1, s), np.int64),
            "text_batch_embeddings": np.zeros((0, TEXT_DIM), np.float32),
            "is_null": np.zeros((1, s), np.uint8), "is_target": np.zeros((1, s), np.uint8),
            "is_padding": np.zeros((1, s), np.uint8)}


def _columns() -> np.ndarray:
    return np.random.default_rng(3).normal(size=(2, TABLE_DIM)).astype(np.float32)


def _torch_tokens(encoding: str, gain: float = 1.0
                  ) -> tuple[np.ndarray, rt_torch.RelationalTransformer]:
    torch.manual_seed(0)
    cfg = rt_torch.ModelConfig(d_model=D, layers=1, heads=4, table_dim=TABLE_DIM,
                               text_dim=TEXT_DIM, num_classes=0, numeric_encoding=encoding,
                               column_gain=gain)
    model = rt_torch.RelationalTransformer(cfg)
    batch = {k: torch.as_tensor(v) for k, v in _batch().items()}
    tables = {"column": torch.from_numpy(_columns()), "categorical": torch.zeros(1, TABLE_DIM)}
    with torch.no_grad():
        return model.encode(batch, tables).numpy(), model


def _jax_tokens(encoding: str, gain: float = 1.0) -> tuple[np.ndarray, dict]:
    import jax
    import jax.numpy as jnp

    cfg = rt_jax.ModelConfig(d_model=D, heads_per_relation=1, layers=1, table_dim=TABLE_DIM,
                             text_dim=TEXT_DIM, out_dim=1, stype=0,
                             numeric_encoding=encoding, column_gain=gain)
    params = rt_jax.init_params(jax.random.PRNGKey(0), cfg)
    batch = {k: jnp.asarray(v) for k, v in _batch().items()}
    tables = {"column_embeddings": jnp.asarray(_columns()),
              "categorical_embeddings": jnp.zeros((1, TABLE_DIM))}
    return np.asarray(rt_jax.encode_cells(params, batch, tables, gain)), params


def _value_parts(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per column, the token of value 1.5 minus that of value 0: what the value adds."""
    return tokens[0, 1] - tokens[0, 0], tokens[0, 3] - tokens[0, 2]


@pytest.mark.parametrize("tokens", [_torch_tokens, _jax_tokens], ids=["torch", "jax"])
def test_shared_encoding_gives_every_column_the_same_value_direction(tokens):
    first, second = _value_parts(tokens("shared")[0])
    np.testing.assert_allclose(first, second, rtol=1e-5, atol=1e-6)
    assert np.abs(first).max() > 0


def test_column_encoding_adds_value_times_the_projected_column_embedding():
    columns = _columns().astype(np.float64)
    shared, _ = _torch_tokens("shared")
    column, model = _torch_tokens("column")
    assert model.numeric_column is not None
    weight = model.numeric_column.weight.detach().numpy().astype(np.float64)  # [D, TABLE_DIM]
    for i, (c, v) in enumerate(CELLS):  # plain numpy: v * (column embedding @ W^T)
        np.testing.assert_allclose(column[0, i] - shared[0, i], v * (columns[c] @ weight.T),
                                   rtol=1e-4, atol=1e-5)
    first, second = _value_parts(column)
    assert np.abs(first - second).max() > 1e-3  # the two columns' values now point apart

    jax_shared, _ = _jax_tokens("shared")
    jax_column, params = _jax_tokens("column")
    w = np.asarray(params["enc"]["numeric_column"], np.float64)  # [TABLE_DIM, D]
    for i, (c, v) in enumerate(CELLS):
        np.testing.assert_allclose(jax_column[0, i] - jax_shared[0, i], v * (columns[c] @ w),
                                   rtol=1e-4, atol=1e-5)


def test_column_gain_scales_exactly_the_terms_made_from_the_column_embedding():
    """Gain g against gain 1: each token moves by (g - 1) x (the column's token + its value x
    its value direction), computed in numpy from the model's own weights."""
    columns = _columns().astype(np.float64)
    one, model = _torch_tokens("column")
    three, _ = _torch_tokens("column", 3.0)
    assert model.numeric_column is not None
    token = model.column.weight.detach().numpy().astype(np.float64)
    bias = model.column.bias.detach().numpy().astype(np.float64)
    direction = model.numeric_column.weight.detach().numpy().astype(np.float64)
    for i, (c, v) in enumerate(CELLS):
        term = columns[c] @ token.T + bias + v * (columns[c] @ direction.T)
        np.testing.assert_allclose(three[0, i] - one[0, i], 2.0 * term, rtol=1e-4, atol=1e-5)
    jax_one, params = _jax_tokens("column")
    jax_three, _ = _jax_tokens("column", 3.0)
    enc = {k: np.asarray(w, np.float64) for k, w in params["enc"].items()}
    for i, (c, v) in enumerate(CELLS):
        term = columns[c] @ enc["column"] + v * (columns[c] @ enc["numeric_column"])
        np.testing.assert_allclose(jax_three[0, i] - jax_one[0, i], 2.0 * term,
                                   rtol=1e-4, atol=1e-5)


def test_shared_encoding_keeps_the_model_it_had():
    """The default builds no extra parameter, so its initial weights (drawn in order from
    the seed) and a checkpoint's parameters are those of the model before the flag."""
    _, model = _torch_tokens("shared")
    assert model.numeric_column is None
    assert not any("numeric_column" in name for name, _ in model.named_parameters())
    _, params = _jax_tokens("shared")
    assert "numeric_column" not in params["enc"]


def test_the_flag_parses_and_is_part_of_the_fingerprint():
    base = ["--db", "d", "--task", "t", "--steps", "1"]
    shared = options.parse_args("torch", base)
    column = options.parse_args("jax", base + ["--numeric-encoding", "column"])
    assert (shared.numeric_encoding, column.numeric_encoding) == ("shared", "column")
    mine, theirs = options.fingerprint(shared, "torch"), options.fingerprint(column, "torch")
    assert {k for k in mine if mine[k] != theirs[k]} == {"numeric_encoding"}
    gained = options.fingerprint(options.parse_args("torch", base + ["--column-gain", "8"]),
                                 "torch")
    assert {k for k in mine if mine[k] != gained[k]} == {"column_gain"}
    for bad in (["--numeric-encoding", "log"], ["--column-gain", "0"]):
        with pytest.raises(options.common.UsageError):
            options.parse_args("torch", base + bad)
