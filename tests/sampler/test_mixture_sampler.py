"""A ``Sampler`` over several databases (docs/mixture.md §4), checked against independent
references: each global step serves the component the plain-Python mixture order names, with
the batch that component's own single-database stream gives at its own step; the global batch
is the same for any world size; a state resumes on another world size; a held-out database
never trains but is evaluated; ids index the shared tables."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlkit.errors import CheckpointError, InvalidArgumentError
from dlkit.nextbatch.mixture import weights_from_counts
from dlkit.sampler import BATCH_KEYS, BATCH_SCALAR_KEYS, Sampler, SamplerWarning
from dlkit.sampler.mixture_run import component_weights
from tests.example_copies import example_named
from tests.nextbatch.test_mixture import naive_step
from tests.sampler.fakedb import D_TEXT, random_database

SHAPE = dict(sequence_length=48, max_rows=12, bfs_child_width=3, split_seed=5)
# per sequence: sliced across ranks; the rest are per batch, or index the batch's own texts
PER_SEQUENCE = [k for k in BATCH_KEYS if k not in BATCH_SCALAR_KEYS
                and k not in ("text_batch_embeddings", "text_embed_ids")]


def cell_texts(batch):
    """The text embedding each text cell with a value points at (zeros elsewhere)."""
    texts = batch["text_batch_embeddings"][batch["text_embed_ids"].astype(np.int64)]
    has_text = ((batch["semantic_types"] == 4) & (batch["is_null"] == 0)
                & (batch["is_target"] == 0) & (batch["is_padding"] == 0))
    return np.where(has_text[..., None], texts, 0)


def mixable(seed: int, name: str, **kwargs):
    db = random_database(seed, num_tables=3, max_rows=120, **kwargs)
    db.database_id = name
    db.path = f"<{name}>"
    db.metadata = SimpleNamespace(embeddings=SimpleNamespace(
        embedder="hashed-ngrams", config={"n": 3}, text_dim=D_TEXT))
    return db


@pytest.fixture(scope="module")
def dbs():
    out = [mixable(5, "alpha", num_tasks=2), mixable(3, "beta", num_tasks=1),
           mixable(10, "gamma", num_tasks=2)]
    assert all(t.num_seeds >= 30 for db in out for t in db.tasks)
    return out


def pull(sampler, count):
    return [sampler.next_train_batch() for _ in range(count)]


def placed(batch, db_index, dbs):
    """A database's own batch as the mixture places it (docs/batch_format.md §7): real ids
    moved by the database's first rows in the shared tables (the databases' tables one after
    another); padding, cells without a category and a non-categorical target keep 0."""
    out = dict(batch)
    column_offset = sum(db.column_emb.shape[0] for db in dbs[:db_index])
    category_offset = sum(db.category_emb.shape[0] for db in dbs[:db_index])
    real = batch["is_padding"] == 0
    out["column_ids"] = np.where(real, batch["column_ids"] + np.int32(column_offset), 0
                                 ).astype(np.int32)
    category = real & (batch["semantic_types"] == 3) & (batch["is_null"] == 0) & \
        (batch["is_hidden"] == 0) & (batch["is_target"] == 0)
    out["categorical_embed_ids"] = np.where(
        category, batch["categorical_embed_ids"] + np.uint32(category_offset), 0
    ).astype(np.uint32)
    if batch["cat_emb_count"][0]:
        out["cat_emb_start"] = batch["cat_emb_start"] + np.uint32(category_offset)
    out["database_idx"] = np.array([db_index], dtype=np.uint32)
    return out


def assert_same(a, b):
    assert tuple(a) == tuple(b) == BATCH_KEYS
    for key in BATCH_KEYS:
        assert a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key]), key


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**63 - 1), weights=st.one_of(
    st.none(), st.lists(st.integers(0, 5), min_size=3, max_size=3).filter(any)))
def test_each_step_is_its_components_own_batch_at_the_reference_step(dbs, seed, weights):
    with Sampler(dbs, 0, 1, batch_size=3, seed=seed, num_prefetch=0, **SHAPE,
                 database_weights=weights) as mix:
        order = mix.mixture_order
        trained = [c for c in mix.components if c.weight]
        assert [c.name for c in trained] == list(order.names)
        if weights is not None:  # a database of weight 0 has no component trained on
            assert {c.database_idx for c in trained} == {d for d, w in enumerate(weights) if w}
        got = pull(mix, 14)
    for step, batch in enumerate(got):
        c, own_step = naive_step(order, step)
        component = trained[c]
        db = dbs[component.database_idx]
        with Sampler(db, 0, 1, batch_size=3, seed=seed, num_prefetch=0, **SHAPE,
                     task_weights={component.task: 1.0}) as alone:
            expected = alone.train_batch(own_step)
        assert batch["task_idx"][0] == component.task_idx
        assert_same(batch, placed(expected, component.database_idx, dbs))


def test_component_weights_are_the_database_shares_split_by_seeds():
    seeds = [[40, 0, 20], [7], [0, 0]]
    # by seeds: proportional to every trainable component's train seeds
    w = weights_from_counts([40, 20, 7])
    assert component_weights(seeds, None) == [[w[0], 0, w[1]], [w[2]], [0, 0]]
    # given: database d's share w_d / sum(w), split among its components by their seeds
    got = component_weights(seeds, [1.0, 3.0, 2.0], total=4000)
    flat = [x for row in got for x in row]
    assert flat[1] == 0 and flat[4:] == [0, 0]
    exact = [Fraction(40, 60) * 1, Fraction(20, 60) * 1, Fraction(3)]
    total = sum(flat)
    for weight, share in zip([flat[0], flat[2], flat[3]], exact):
        assert abs(Fraction(weight, total) - share / sum(exact)) <= Fraction(1, total)
    with pytest.raises(InvalidArgumentError, match="nothing to train on"):
        component_weights([[0], [5]], [1.0, 0.0])
    # any scale of weights: huge ones do not overflow, a tiny positive one still trains
    assert component_weights([[5], [5]], [1e300, 1e300]) == [[512], [512]]
    assert component_weights([[5], [5]], [1e308, 1e308]) == [[512], [512]]
    tiny = component_weights([[5], [5]], [1e-10, 1.0])
    assert tiny[0][0] >= 1 and tiny[1][0] > 1000


@pytest.mark.parametrize("world_size", [2, 3])
def test_the_global_batch_is_the_same_on_any_world_size(dbs, world_size):
    with Sampler(dbs, 0, 1, batch_size=6, seed=4, num_prefetch=0, **SHAPE) as one:
        reference = pull(one, 10)
    ranks = []
    for rank in range(world_size):
        with Sampler(dbs, rank, world_size, batch_size=6 // world_size, seed=4,
                     num_prefetch=2, num_threads=2, **SHAPE) as s:
            ranks.append(pull(s, 10))
    for step, ref in enumerate(reference):
        parts = [r[step] for r in ranks]
        for key in PER_SEQUENCE:
            assert np.array_equal(np.concatenate([p[key] for p in parts]), ref[key]), key
        for key in BATCH_SCALAR_KEYS:
            assert all(np.array_equal(p[key], ref[key]) for p in parts), key
        assert np.array_equal(np.concatenate([cell_texts(p) for p in parts]), cell_texts(ref))


def test_a_state_resumes_on_another_world_size(dbs):
    with Sampler(dbs, 0, 1, batch_size=4, seed=9, num_prefetch=0, **SHAPE) as one:
        pull(one, 7)
        after = pull(one, 8)
    states = []
    for rank in range(2):
        with Sampler(dbs, rank, 2, batch_size=2, seed=9, num_prefetch=3, num_threads=2,
                     **SHAPE) as s:
            pull(s, 7)
            states.append(json.loads(json.dumps(s.state_dict())))
    assert states[0] == states[1]  # every rank's state is the global one
    with Sampler(dbs, 0, 1, batch_size=4, seed=9, num_prefetch=2, **SHAPE) as resumed:
        resumed.load_state_dict(states[1])
        for got, expected in zip(pull(resumed, 8), after):
            assert_same(got, expected)


def test_a_component_epoch_serves_each_train_seed_at_most_once(dbs):
    with Sampler(dbs, 0, 1, batch_size=4, seed=2, num_prefetch=0, **SHAPE) as mix:
        seen: dict[str, list[int]] = {}
        for _ in range(60):
            built = mix.next_built_batch()
            key = f"{int(built.arrays['database_idx'][0])}/{built.task}/{built.epoch}"
            seen.setdefault(key, []).extend(built.seed_indices.tolist())
        for key, positions in seen.items():
            d, task, _ = key.split("/")
            train = set(mix.database_splits(int(d))[mix.builders[int(d)].task(task).index]
                        .positions[0].tolist())
            assert len(positions) == len(set(positions)), key
            assert set(positions) <= train, key


def test_a_held_out_database_never_trains_and_is_evaluated_whole(dbs):
    with Sampler(dbs, 0, 1, batch_size=4, seed=1, num_prefetch=0, **SHAPE,
                 database_weights=[1, 0, 2]) as mix:
        assert all(int(b["database_idx"][0]) != 1 for b in pull(mix, 40))
        assert mix.databases[1] == ("beta", bytes(range(32)).hex())
        batches = list(mix.iter_eval("val", database="beta"))
        assert len(batches) == mix.eval_steps("val", database=1)
        assert {int(b["database_idx"][0]) for b in batches} == {1}
        rows = np.concatenate([b["anchor_rows"][b["sequence_mask"] == 1] for b in batches])
        task = dbs[1].tasks[0]
        val = mix.database_splits("beta")[0].positions[1]
        assert sorted(rows.tolist()) == sorted(task.anchor_row[val].tolist())
        # a whole pass over the mixture is database after database
        every = [int(b["database_idx"][0]) for b in mix.iter_eval("val")]
        assert every == sorted(every) and set(every) == {0, 1, 2}


def test_ids_index_the_shared_tables(dbs):
    with Sampler(dbs, 0, 1, batch_size=4, seed=6, num_prefetch=0, **SHAPE) as mix:
        columns, categories = mix.column_embeddings(), mix.categorical_embeddings()
        assert columns.shape[0] == sum(db.column_emb.shape[0] for db in dbs)
        assert categories.shape[0] == sum(db.category_emb.shape[0] for db in dbs)
        offsets = np.cumsum([0] + [db.column_emb.shape[0] for db in dbs])
        cat_offsets = np.cumsum([0] + [db.category_emb.shape[0] for db in dbs])
        for batch in pull(mix, 20):
            d = int(batch["database_idx"][0])
            real = batch["is_padding"] == 0
            ids = batch["column_ids"][real]
            assert np.array_equal(columns[ids], dbs[d].column_emb[ids - offsets[d]])
            category = real & (batch["semantic_types"] == 3) & (batch["is_null"] == 0) & \
                (batch["is_hidden"] == 0) & (batch["is_target"] == 0)
            cats = batch["categorical_embed_ids"][category]
            assert np.array_equal(categories[cats],
                                  dbs[d].category_emb[cats.astype(np.int64) - cat_offsets[d]])
            # what holds no id holds 0, as in one database: never a row past a table's end
            assert not batch["column_ids"][~real].any()
            assert not batch["categorical_embed_ids"][~category].any()
            assert batch["cat_emb_count"][0] or batch["cat_emb_start"][0] == 0


def test_a_state_of_another_mixture_is_refused(dbs):
    with Sampler(dbs, 0, 1, batch_size=4, seed=1, num_prefetch=0, **SHAPE) as mix:
        pull(mix, 2)
        state = mix.state_dict()
    with Sampler(dbs[:2], 0, 1, batch_size=4, seed=1, num_prefetch=0, **SHAPE) as other, \
            pytest.raises(CheckpointError, match="databases"):
        other.load_state_dict(state)
    with Sampler(dbs, 0, 1, batch_size=4, seed=1, num_prefetch=0, **SHAPE,
                 database_weights=[1, 1, 5]) as reweighted, \
            pytest.raises(CheckpointError, match="mixture_hash"):
        reweighted.load_state_dict(state)


def test_bad_mixtures_are_refused_by_name(dbs):
    twin = mixable(4, "alpha", num_tasks=2)
    twin.path = "<another alpha>"
    with pytest.raises(InvalidArgumentError, match="two databases have the id 'alpha'"):
        Sampler([dbs[0], twin], batch_size=2, **SHAPE)
    for bad, problem in (([], "at least one database"), ([dbs[0], 7], "got 7")):
        with pytest.raises(InvalidArgumentError, match=problem):
            Sampler(bad, batch_size=2, **SHAPE)
    with pytest.raises(InvalidArgumentError, match="<alpha> is listed twice"):
        Sampler([dbs[0], dbs[1], dbs[0]], batch_size=2, **SHAPE)
    other = mixable(7, "delta")
    other.metadata.embeddings.embedder = "minilm"
    with pytest.raises(InvalidArgumentError, match="embedded by different models"):
        Sampler([dbs[0], other], batch_size=2, **SHAPE)
    for weights, problem in (([1, 2], "2 values for 3 databases"), ([1, -1, 1], ">= 0"),
                             ([0, 0, 0], "all zero"), ("abc", "a list of numbers")):
        with pytest.raises(InvalidArgumentError, match=problem):
            Sampler(dbs, batch_size=2, **SHAPE, database_weights=weights)
    with pytest.raises(InvalidArgumentError, match="a mixture weighs its databases"):
        Sampler(dbs, batch_size=2, **SHAPE, task_weights=[1, 1])
    with pytest.raises(InvalidArgumentError, match="needs a list of databases"):
        Sampler(dbs[0], batch_size=2, **SHAPE, database_weights=[1])
    with Sampler(dbs, batch_size=2, num_prefetch=0, **SHAPE) as mix:
        with pytest.raises(InvalidArgumentError, match="name one"):
            mix.label_info()
        with pytest.raises(InvalidArgumentError, match="did you mean 'gamma'"):
            mix.label_info(database="gama")
        with pytest.raises(InvalidArgumentError, match="name the task's database"):
            mix.eval_steps("val", task=0)
        assert mix.label_info(database=1).num_classes >= 0
        assert "Sampler([<alpha>, <beta>, <gamma>]" in repr(mix)


# --- real databases on disk -----------------------------------------------------------------

@pytest.fixture(scope="module")
def shops(tmp_path_factory):
    from dlkit.db.write.embed import HashedNgramEmbedder

    root = tmp_path_factory.mktemp("shops")
    return (example_named(root, "shop-a"), example_named(root, "shop-b"),
            example_named(root, "shop-c", HashedNgramEmbedder(seed=1)))


def test_real_databases_share_one_text_space(shops):
    import dlkit.torch

    a, b, _ = shops
    with Sampler([a, b], batch_size=4, seed=3, num_prefetch=2, **SHAPE) as mix, \
            Sampler(a, batch_size=4, seed=3, num_prefetch=0, **SHAPE) as alone:
        assert [entry.name for entry in mix.databases] == ["shop-a", "shop-b"]
        own = alone.column_embeddings()
        tables = dlkit.torch.upload_tables(mix)
        shared = tables["column_embeddings"].numpy()
        # the same schema embedded by the same embedder: b's rows are a's rows, again
        assert np.array_equal(shared, np.concatenate([own, own]))
        assert tables["categorical_embeddings"].shape[0] == \
            2 * alone.categorical_embeddings().shape[0]
        seen = {int(mix.next_train_batch()["database_idx"][0]) for _ in range(30)}
        assert seen == {0, 1}


def test_real_databases_of_two_text_spaces_are_refused_by_path(shops):
    a, _, c = shops
    with pytest.raises(InvalidArgumentError, match=f"{a}.*{c}.*same words"):
        Sampler([a, c], batch_size=4, **SHAPE)


def test_a_mixture_file_is_a_sampler_of_its_components(shops):
    from dlkit.sampler.mixture import check_mixture, load_mixture

    a, b, _ = shops
    path = a.parent / "dlkit-mixture.toml"
    path.write_text(f'''[mixture]
weights = "given"
split_seed = 17

[[component]]
database = "{a.name}"
tasks = ["order_status", "review_rating"]
weight = 3

[[component]]
database = "{b.name}"
task = "review_rating"
train = false
''')
    check = check_mixture(load_mixture(path))
    with Sampler(path, batch_size=4, seed=3, num_prefetch=0, **SHAPE) as mix:
        assert mix.config.split_seed == 17
        weights = {c.name: c.weight for c in mix.components}
        assert weights == {"shop-a/review_rating": 3, "shop-a/order_status": 3,
                           "shop-a/user_premium": 0, "shop-b/review_rating": 0,
                           "shop-b/order_status": 0, "shop-b/user_premium": 0}
        assert {c.name: c.weight for c in check.components if c.train} == \
            {name: w for name, w in weights.items() if w}
        # the file's order (not the databases' task order): the mixture the check declares
        assert mix.mixture_order.names == ("shop-a/order_status", "shop-a/review_rating")
        assert mix.mixture_order.mixture_hash.hex() == check.mixture_hash
        served = set()
        for _ in range(24):
            built = mix.next_built_batch()
            served.add((int(built.arrays["database_idx"][0]), built.task))
        assert served == {(0, "review_rating"), (0, "order_status")}
        assert mix.eval_steps("val", "review_rating", database="shop-b") > 0
    with pytest.raises(InvalidArgumentError, match="gives its own weights"):
        Sampler(path, database_weights=[1, 1])
    with pytest.raises(InvalidArgumentError, match="shop-a/order_status has fewer train seeds "
                                                   "than a global batch"), \
            pytest.warns(SamplerWarning, match="fewer than the global batch"):
        Sampler(path, batch_size=100_000)


def test_a_mixture_file_opens_each_database_once_and_closes_them(shops, monkeypatch):
    """The file's check and the Sampler share the open databases; the Sampler closes them,
    and a refusal after the check (its own weights given again) closes every one at once."""
    import dlkit.db
    from dlkit.db.read.mapped import Database

    a, b, _ = shops
    path = a.parent / "once.toml"
    path.write_text(f'[[component]]\ndatabase = "{a.name}"\ntask = "review_rating"\n\n'
                    f'[[component]]\ndatabase = "{b.name}"\ntask = "order_status"\n')
    opened, closed = [], []
    real_open, real_close = dlkit.db.open_database, Database.close

    def counting_open(p, *args, **kwargs):
        opened.append(Path(p).name)
        return real_open(p, *args, **kwargs)

    def counting_close(self):
        closed.append(self.path.name)
        real_close(self)

    monkeypatch.setattr(dlkit.db, "open_database", counting_open)
    monkeypatch.setattr(Database, "close", counting_close)
    with Sampler(path, batch_size=4, num_prefetch=0, **SHAPE) as mix:
        mix.next_built_batch()
        assert (opened, closed) == ([a.name, b.name], [])
    assert sorted(closed) == sorted(opened)
    opened.clear()
    closed.clear()
    with pytest.raises(InvalidArgumentError, match="gives its own weights"):
        Sampler(path, database_weights=[1, 1])
    assert opened == [a.name, b.name] and sorted(closed) == sorted(opened)
