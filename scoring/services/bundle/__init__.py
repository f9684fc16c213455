"""A study bundle: one archive that another lab can read with any Frictionless tool and import
into its own installation to re-score the study (``bundle_stream`` writes it, ``bundle_import``
reads it back as a new closed study)."""
from .export import bundle_filename, bundle_stream
from .importing import BundleError, bundle_import, bundled_utility_missing

__all__ = ["BundleError", "bundle_filename", "bundle_import", "bundle_stream", "bundled_utility_missing"]
