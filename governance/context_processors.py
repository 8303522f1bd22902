"""Warnings shown as a banner on every admin page."""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


def admin_banners(request) -> dict:
    if not request.path.startswith("/admin/") or not getattr(request.user, "is_staff", False):
        return {}
    from governance.exposure import embedding_exposure_warning

    try:
        warning = embedding_exposure_warning()
    except Exception:
        logger.exception("could not evaluate admin banners")
        return {}
    return {"owlai_admin_banners": [warning] if warning else []}
