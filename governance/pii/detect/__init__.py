"""Format detectors for personal data, as a pipeline: decode, fold, match
and validate, with an offset map back to the original text (see
governance.pii.detect.pipeline). governance.pii.detectors re-exports this API."""

from governance.pii.detect.match import Detection, normalise
from governance.pii.detect.pipeline import detect, detect_spans, mask_text
from governance.pii.kinds import NORMALISERS, PiiKind

__all__ = ["NORMALISERS", "Detection", "PiiKind", "detect", "detect_spans", "mask_text", "normalise"]
