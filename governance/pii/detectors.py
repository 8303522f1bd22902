"""The format detectors' public API, kept here for its callers.

The detectors live in the package governance.pii.detect (decode, fold, match
and validate, with an offset map back to the original text); this module
re-exports what callers import from it."""

from governance.pii.detect import NORMALISERS, Detection, PiiKind, detect, detect_spans, mask_text, normalise

__all__ = ["NORMALISERS", "Detection", "PiiKind", "detect", "detect_spans", "mask_text", "normalise"]
