"""Generated databases for the key-inference tests and benchmark (numpy + pyarrow only).

``write_flights``: five tables like a flights database whose keys are string codes: airlines
(carrier), airports (faa), planes (tailnum), weather (obs_key) and flights (id); flights
refer to all four others, weather to airports. As in real reference tables, some codes
dangle: destinations missing from airports, tail numbers missing from planes (about 15% of
flights, as in nycflights13), hours missing from weather; some tail numbers are null.
``write_integer_ids``: tables keyed by integer ids 0..n-1, which lie inside each other.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

FLIGHTS_PRIMARY = {"airlines": "carrier", "airports": "faa", "planes": "tailnum",
                   "weather": "obs_key", "flights": "id"}
FLIGHTS_FOREIGN = {("flights", "carrier"): "airlines", ("flights", "tailnum"): "planes",
                   ("flights", "origin"): "airports", ("flights", "dest"): "airports",
                   ("flights", "obs_key"): "weather", ("weather", "origin"): "airports"}

LETTERS = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWXYZ"))


def _codes(rng: np.random.Generator, n: int, length: int) -> np.ndarray:
    """``n`` distinct upper-case codes of ``length`` letters."""
    seen: dict[str, None] = {}
    while len(seen) < n:
        for row in rng.choice(LETTERS, size=(n, length)):
            seen.setdefault("".join(row))
    return np.array(list(seen)[:n])


def _write(path: Path, table: pa.Table, row_group_size: int) -> None:
    pq.write_table(table, path, row_group_size=row_group_size)


def write_flights(out: Path, num_flights: int, *, seed: int = 7,
                  row_group_size: int = 1 << 20) -> Path:
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    carriers = _codes(rng, 16, 2)
    _write(out / "airlines.parquet", pa.table({
        "carrier": carriers,
        "name": [f"{c} Air Lines Inc." for c in carriers],
    }), row_group_size)
    faa = _codes(rng, 1400, 3)
    _write(out / "airports.parquet", pa.table({
        "faa": faa,
        "name": [f"{c} Regional Airport" for c in faa],
        "lat": rng.uniform(20, 60, len(faa)),
        "lon": rng.uniform(-160, -60, len(faa)),
        "alt": rng.integers(0, 9000, len(faa)),
        "tz": rng.integers(-10, -4, len(faa)),
        "dst": rng.choice(["A", "N", "U"], len(faa)),
        "tzone": rng.choice(["America/New_York", "America/Chicago", "America/Denver"], len(faa)),
    }), row_group_size)
    fleet = np.unique([f"N{n}{a}{b}" for n, a, b in zip(rng.integers(100, 1000, 4000),
                                                        rng.choice(LETTERS, 4000),
                                                        rng.choice(LETTERS, 4000))])
    fleet = fleet[rng.permutation(len(fleet))]
    in_planes = fleet[: int(len(fleet) * 0.82)]  # the rest fly but are not in planes
    _write(out / "planes.parquet", pa.table({
        "tailnum": in_planes,
        "year": pa.array(rng.integers(1960, 2013, len(in_planes)),
                         mask=rng.random(len(in_planes)) < 0.02),
        "type": rng.choice(["Fixed wing multi engine", "Fixed wing single engine"], len(in_planes)),
        "manufacturer": rng.choice(["BOEING", "AIRBUS", "EMBRAER", "BOMBARDIER"], len(in_planes)),
        "model": rng.choice(["737-824", "A320-232", "ERJ 190-100", "CL-600"], len(in_planes)),
        "seats": rng.integers(2, 400, len(in_planes)),
    }), row_group_size)
    origins = np.array(sorted(rng.choice(faa, 3, replace=False)))
    hours = np.arange(24 * 365)
    obs = np.array([f"{o}-{h:05d}" for o in origins for h in hours])
    kept = obs[rng.random(len(obs)) > 0.005]  # a few hours without a weather record
    _write(out / "weather.parquet", pa.table({
        "obs_key": kept,
        "origin": [k[:3] for k in kept],
        "temp": rng.normal(55, 17, len(kept)),
        "wind_speed": rng.gamma(2, 5, len(kept)),
        "time_hour": pa.array((np.array([int(k[4:]) for k in kept]) * 3600 * 10**6)
                              .astype("datetime64[us]")),
    }), row_group_size)
    # flights: built with array ops, so millions of rows stay quick to make
    n = num_flights
    dest_pool = np.concatenate([faa[:100], _codes(rng, 120, 3)[-4:]])  # 4 codes not in airports
    origin_idx = rng.integers(0, 3, n)
    hour = rng.integers(0, len(hours), n)
    carrier = carriers[rng.integers(0, len(carriers), n)]
    tail = fleet[rng.integers(0, len(fleet), n)]
    flight_no = rng.integers(1, 8000, n)
    ids = pc.binary_join_element_wise(pa.array(carrier),
                                      pc.cast(pa.array(np.arange(n)), pa.string()), "-")
    obs_key = pc.binary_join_element_wise(
        pa.array(origins[origin_idx]),
        pc.utf8_lpad(pc.cast(pa.array(hour), pa.string()), 5, "0"), "-")
    _write(out / "flights.parquet", pa.table({
        "id": ids,
        "year": np.full(n, 2013),
        "month": rng.integers(1, 13, n),
        "day": rng.integers(1, 29, n),
        "dep_delay": rng.normal(12, 40, n),
        "arr_delay": rng.normal(7, 44, n),
        "carrier": carrier,
        "flight": flight_no,
        "tailnum": pa.array(tail, mask=rng.random(n) < 0.01),
        "origin": origins[origin_idx],
        "dest": dest_pool[rng.integers(0, len(dest_pool), n)],
        "air_time": rng.integers(20, 600, n),
        "distance": rng.integers(80, 5000, n),
        "obs_key": obs_key,
        "time_hour": pa.array((hour * 3600 * 10**6).astype("datetime64[us]")),
    }), row_group_size)
    return out


INT_PRIMARY = {"users": "user_id", "products": "product_id", "orders": "order_id",
               "stores": "id", "reviews": "review_id", "employees": "employee_id",
               "drivers": "driverId", "results": "resultId"}
INT_FOREIGN = {("orders", "user_id"): "users", ("orders", "product_id"): "products",
               ("orders", "store"): "stores", ("reviews", "order_id"): "orders",
               ("reviews", "userId"): "users",
               ("employees", "manager_employee_id"): "employees",
               ("employees", "store_id"): "stores",
               ("events", "user_id"): "users", ("results", "driverId"): "drivers"}


def write_integer_ids(out: Path, *, seed: int = 3, scale: int = 1) -> Path:
    """Integer ids 0..n-1 everywhere: every small integer column lies inside every key."""
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    nu, npd, no, ns = 1000 * scale, 200 * scale, 10000 * scale, 10
    pq.write_table(pa.table({"user_id": np.arange(nu), "age": rng.integers(18, 90, nu),
                             "signup": pa.array((np.arange(nu) * 10**9).astype("datetime64[us]"))}),
                   out / "users.parquet")
    pq.write_table(pa.table({"product_id": np.arange(npd), "price": rng.uniform(1, 99, npd),
                             "stock": rng.integers(0, 50, npd)}), out / "products.parquet")
    pq.write_table(pa.table({"id": np.arange(ns), "city": [f"city{i}" for i in range(ns)]}),
                   out / "stores.parquet")
    pq.write_table(pa.table({
        "order_id": np.arange(no), "user_id": rng.integers(0, nu, no),
        "product_id": rng.integers(0, npd, no), "quantity": rng.integers(1, 6, no),
        "store": rng.integers(0, ns, no), "discount_pct": rng.integers(0, 30, no)}),
        out / "orders.parquet")
    nr = no // 2
    pq.write_table(pa.table({
        "review_id": np.arange(nr), "order_id": rng.choice(no, nr, replace=False),
        "userId": rng.integers(0, nu, nr), "rating": rng.integers(1, 6, nr),
        "helpful_votes": rng.integers(0, 200, nr)}), out / "reviews.parquet")
    ne = 60
    pq.write_table(pa.table({
        "employee_id": np.arange(ne),
        "manager_employee_id": pa.array(rng.integers(0, ne, ne), mask=np.arange(ne) < 3),
        "store_id": rng.integers(0, ns, ne), "level": rng.integers(0, 5, ne)}),
        out / "employees.parquet")
    nev = 3000
    pq.write_table(pa.table({
        "payload": [f"e{i:08x}" for i in rng.choice(1 << 30, nev, replace=False)],
        "user_id": rng.integers(0, nu, nev), "kind": rng.choice(["click", "view"], nev),
        "at": pa.array((rng.integers(0, 10**6, nev) * 10**6).astype("datetime64[us]"))}),
        out / "events.parquet")
    nd = 40
    pq.write_table(pa.table({"driverId": np.arange(nd), "forename": [f"d{i}" for i in range(nd)],
                             "number": rng.choice(99, nd, replace=False)}), out / "drivers.parquet")
    nres = 800
    # "result": a number named like its own table, not a reference to it
    pq.write_table(pa.table({"resultId": np.arange(nres), "result": rng.integers(1, 30, nres),
                             "driverId": rng.integers(0, nd, nres),
                             "position": rng.integers(1, 21, nres),
                             "grid": rng.integers(0, 21, nres)}), out / "results.parquet")
    return out
