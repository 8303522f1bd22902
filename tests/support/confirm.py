"""Posting a governed admin change that shows an impact page first
(audit.confirm): post, and when the page comes back, confirm it as the
page's own button would (the same fields and the digest of what it showed)."""

from __future__ import annotations

from audit.confirm import CONFIRM_FIELD


def impact_page(response) -> bool:
    return response.status_code == 200 and "impact-confirm" in response.content.decode()


def confirm(client, url: str, response, *, follow: bool = False):
    """Press "Yes, apply" on the impact page `response` (posted to `url`)."""
    assert impact_page(response), response.content.decode()[:2000]
    data: dict[str, list[str]] = {}
    for name, value in response.context["keep"]:
        data.setdefault(name, []).append(value)
    data[CONFIRM_FIELD] = [response.context["digest"]]
    return client.post(url, data, follow=follow)


def post_confirmed(client, url: str, data: dict, *, follow: bool = False):
    """Post `data`; confirm the impact page if one is shown."""
    response = client.post(url, data)
    if impact_page(response):
        return confirm(client, url, response, follow=follow)
    if follow and response.status_code == 302:
        return client.get(response.url, follow=True)
    return response
