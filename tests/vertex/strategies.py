"""Hypothesis strategies for Google Cloud names, shared by the rule tests and the emulator's."""

from __future__ import annotations

import string

from hypothesis import strategies as st

PROJECT_ID_CHARS = string.ascii_lowercase + string.digits + "-"
"""What a project ID may hold."""

project_ids = st.builds(
    lambda first, middle, last: first + middle + last,
    st.sampled_from(string.ascii_lowercase),
    st.text(PROJECT_ID_CHARS, min_size=4, max_size=28),
    st.sampled_from(string.ascii_lowercase + string.digits),
)
"""Project IDs by Google Cloud's rule: 6-30 characters, a letter first, no hyphen last."""
