"""Training curves: the series read from a record, the moving average against a plain loop,
and the points drawn inside the chart."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from dlkit.viewer.curves import HEIGHT, WIDTH, Series, moving_average, series_svg

FLOATS = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@given(st.lists(FLOATS, min_size=1, max_size=60), st.integers(1, 10))
def test_moving_average_is_the_mean_of_the_last_window(values, window):
    got = moving_average(tuple(values), window)
    for i, v in enumerate(got):
        part = values[max(0, i - window + 1):i + 1]
        assert abs(v - sum(part) / len(part)) <= 1e-6 * max(1.0, max(abs(x) for x in part))


@given(st.lists(FLOATS, min_size=1, max_size=40))
def test_points_stay_inside_the_chart(values):
    svg = series_svg(Series("loss", tuple(range(len(values))), tuple(values)))
    for points in re.findall(r'points="([^"]*)"', svg):
        for pair in points.split():
            x, y = map(float, pair.split(","))
            assert 0 <= x <= WIDTH and 0 <= y <= HEIGHT
