"""Format detectors for personal data, as a pipeline: decode, fold, match.

See governance.pii.detect.pipeline for the stages."""

from governance.pii.detect.match import NORMALISERS, Detection, PiiKind, detect, detect_spans, mask_text, normalise

__all__ = ["NORMALISERS", "Detection", "PiiKind", "detect", "detect_spans", "mask_text", "normalise"]
