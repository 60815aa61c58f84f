# A stand-in for veRL in camproxy's tests: the version under test comes from
# $VERL_STUB_VERSION (0.7.0's own reads "0.7.0.dev").
import os

__version__ = os.environ.get("VERL_STUB_VERSION", "0.7.0.dev")
