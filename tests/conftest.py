"""Suite-wide settings: hypothesis profiles (no deadlines: the first call of a kernel compiles)."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60
)
settings.register_profile(
    "thorough", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=600
)
settings.load_profile(os.environ.get("DLKIT_HYPOTHESIS_PROFILE", "default"))
