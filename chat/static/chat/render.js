/* The chat page's renderer: model text as sanitised markdown with masked
 * values ([전화번호-3]) as chips, and tool results as plain DOM.
 *
 * Everything the model or a tool wrote is untrusted. Two layers keep it
 * inert: markdown-it with raw HTML off (tags come out as text) and only
 * http(s)/mailto links, then DOMPurify with a short allowlist of tags and
 * attributes. Code blocks are highlighted by highlight.js from their text
 * (its output passes DOMPurify again: <span class="hljs-…"> only). Images are never loaded: a model could put data it read into
 * an image URL and the browser would send it away without a click. Chips
 * and tool results are built with createElement/textContent only. The page
 * also sends a Content-Security-Policy without inline scripts, so a
 * sanitiser bug alone would still not run code.
 */
(function (global) {
  "use strict";

  const ALLOWED_TAGS = [
    "p", "br", "hr", "strong", "em", "del", "s", "code", "pre", "blockquote",
    "ul", "ol", "li", "h1", "h2", "h3", "h4", "h5", "h6",
    "table", "thead", "tbody", "tr", "th", "td", "a",
  ];  // no <span>: only highlight.js's pass (below) may add one
  const ALLOWED_ATTR = ["href", "title", "start"];
  const SAFE_URL = /^(?:https?:|mailto:)/i;

  const md = global.markdownit({ html: false, linkify: true, breaks: true, typographer: false });
  md.disable("image");
  md.validateLink = (url) => SAFE_URL.test(String(url).trim());

  const purify = global.DOMPurify;
  // `class` is allowed in two shapes only: a fence's language on <code>
  // (markdown-it's `language-sql`), and highlight.js's own `hljs-*` scopes on
  // the <span>s of its output. Any other class (a model imitating a token
  // chip or a button) is dropped.
  const LANGUAGE_CLASS = /^language-[\w+#.-]{1,30}$/;
  const HLJS_CLASS = /^(?:hljs-[\w-]+|[\w-]+_+)(?: (?:hljs-[\w-]+|[\w-]+_+))*$/;
  purify.addHook("uponSanitizeAttribute", (node, data) => {
    if (data.attrName !== "class") return;
    if (node.tagName === "CODE" && LANGUAGE_CLASS.test(data.attrValue)) data.forceKeepAttr = true;
    else if (!(node.tagName === "SPAN" && HLJS_CLASS.test(data.attrValue))) data.keepAttr = false;
  });
  purify.addHook("afterSanitizeAttributes", (node) => {
    if (node.tagName === "A") {
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", "noopener noreferrer nofollow");
    }
  });

  function sanitize(html) {
    return purify.sanitize(html, {
      ALLOWED_TAGS,
      ALLOWED_ATTR,
      ALLOWED_URI_REGEXP: SAFE_URL,
      ALLOW_DATA_ATTR: false,
      RETURN_DOM_FRAGMENT: true,
    });
  }

  /* highlight.js's markup for `code` (it escapes the text itself); kept to
   * <span class="hljs-…"> by a second sanitising pass all the same. */
  const hljs = global.hljs;
  const AUTO_LANGUAGES = ["sql", "python", "javascript", "typescript", "json", "bash", "yaml", "xml", "java", "go"];
  const HIGHLIGHT_MAX_CHARS = 20000; // past this, plain text: the page stays fast while streaming

  function highlightCode(code) {
    const raw = code.textContent;
    code._raw = raw; // what "copy" copies: the text as written (tokens, not revealed values)
    if (!hljs || raw.length > HIGHLIGHT_MAX_CHARS) return;
    const match = /^language-(.+)$/.exec(code.getAttribute("class") || "");
    const language = match && hljs.getLanguage(match[1]) ? match[1] : null;
    let html;
    try {
      html = language
        ? hljs.highlight(raw, { language, ignoreIllegals: true }).value
        : hljs.highlightAuto(raw, AUTO_LANGUAGES).value;
    } catch (e) {
      return; // stays plain text
    }
    const spans = purify.sanitize(html, {
      ALLOWED_TAGS: ["span"],
      ALLOWED_ATTR: ["class"],
      ALLOW_DATA_ATTR: false,
      RETURN_DOM_FRAGMENT: true,
    });
    code.replaceChildren(spans);
    code.classList.add("hljs");
  }

  // Token labels come from the server (governance.pii.kinds): one vocabulary.
  let tokenPattern = null;
  let chipFactory = null;

  function configure({ tokenLabels, makeChip }) {
    const labels = tokenLabels.map((l) => l.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
    tokenPattern = labels.length ? new RegExp(`\\[(?:${labels.join("|")})-\\d+\\]`, "g") : null;
    chipFactory = makeChip;
  }

  /* Text with every token replaced by a chip, as DOM nodes. */
  function textWithChips(text) {
    const fragment = document.createDocumentFragment();
    let last = 0;
    if (tokenPattern) {
      for (const match of text.matchAll(tokenPattern)) {
        fragment.appendChild(document.createTextNode(text.slice(last, match.index)));
        fragment.appendChild(chipFactory ? chipFactory(match[0]) : document.createTextNode(match[0]));
        last = match.index + match[0].length;
      }
    }
    fragment.appendChild(document.createTextNode(text.slice(last)));
    return fragment;
  }

  function chipTextNodes(root) {
    if (!tokenPattern) return;
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    const found = [];
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      tokenPattern.lastIndex = 0;
      // Inside a link a chip would be a click target in a click target.
      if (tokenPattern.test(node.nodeValue) && !node.parentElement.closest("a")) found.push(node);
    }
    for (const node of found) node.replaceWith(textWithChips(node.nodeValue));
  }

  /* Markdown -> a sanitised fragment with chips; tables get a scrolling wrapper. */
  function markdown(text) {
    const fragment = sanitize(md.render(String(text || "")));
    for (const table of fragment.querySelectorAll("table")) {
      const wrap = document.createElement("div");
      wrap.className = "table-wrap";
      table.replaceWith(wrap);
      wrap.appendChild(table);
    }
    for (const code of fragment.querySelectorAll("pre > code")) highlightCode(code);
    chipTextNodes(fragment);
    return fragment;
  }

  function cell(tag, value) {
    const el = document.createElement(tag);
    el.appendChild(textWithChips(value === null || value === undefined ? "" : String(value)));
    return el;
  }

  /* A tool's result as the model read it: rows as a table, hits as a list,
   * anything else as preformatted text. Never parsed as HTML. */
  function toolResult(content, { maxRows = 50 } = {}) {
    const box = document.createElement("div");
    box.className = "tool-result";
    let payload = null;
    try {
      payload = JSON.parse(content);
    } catch (e) {
      payload = null;
    }
    if (payload && Array.isArray(payload.columns) && Array.isArray(payload.rows)) {
      const wrap = document.createElement("div");
      wrap.className = "table-wrap";
      const table = document.createElement("table");
      const head = document.createElement("tr");
      for (const c of payload.columns) head.appendChild(cell("th", c));
      const thead = document.createElement("thead");
      thead.appendChild(head);
      table.appendChild(thead);
      const body = document.createElement("tbody");
      for (const row of payload.rows.slice(0, maxRows)) {
        const tr = document.createElement("tr");
        for (const v of Array.isArray(row) ? row : [row]) tr.appendChild(cell("td", typeof v === "object" && v !== null ? JSON.stringify(v) : v));
        body.appendChild(tr);
      }
      table.appendChild(body);
      wrap.appendChild(table);
      box.appendChild(wrap);
      return box;
    }
    if (payload && Array.isArray(payload.hits)) {
      const list = document.createElement("ul");
      for (const hit of payload.hits) {
        const li = document.createElement("li");
        const title = cell("strong", hit && hit.title);
        li.appendChild(title);
        li.appendChild(document.createTextNode(" "));
        li.appendChild(textWithChips(String((hit && hit.text) || "").slice(0, 300)));
        list.appendChild(li);
      }
      box.appendChild(list);
      return box;
    }
    const pre = document.createElement("pre");
    pre.appendChild(textWithChips(String(content || "")));
    box.appendChild(pre);
    return box;
  }

  global.OwlRender = { configure, markdown, textWithChips, toolResult };
})(window);
