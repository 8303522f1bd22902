/* The shared conversation page: a read-only snapshot rendered as the chat
 * page renders a conversation (render.js: sanitised markdown, tokens as
 * chips, tool results as plain DOM), a reveal under the viewer's own
 * permission, and "continue in a new conversation". Everything shown is
 * untrusted text: only textContent, createElement and render.js build DOM.
 */
(function () {
  "use strict";

  const CONFIG = JSON.parse(document.getElementById("shared-config").textContent);
  const T = CONFIG.text;
  const $ = (id) => document.getElementById(id);
  const log = $("log");
  let snapshot = null;

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  function fmt(template, values) {
    return template.replace(/%\((\w+)\)s/g, (_, k) => (values[k] === undefined ? "" : String(values[k])));
  }

  function csrf() {
    const m = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    if (m) return decodeURIComponent(m[1]);
    const input = document.querySelector("[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  async function api(url, options = {}) {
    const response = await fetch(url, {
      credentials: "same-origin",
      ...options,
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf(), ...(options.headers || {}) },
    });
    if (response.status === 401 || response.status === 403 && response.redirected) {
      location.href = `${CONFIG.loginUrl}?next=${encodeURIComponent(location.pathname)}`;
    }
    let body = null;
    try {
      body = await response.json();
    } catch (e) {
      body = null;
    }
    if (!response.ok) {
      const error = new Error((body && body.detail) || T.networkError);
      error.status = response.status;
      throw error;
    }
    return body;
  }

  function showError(message) {
    const box = $("shared-error");
    box.textContent = message || "";
    box.hidden = !message;
  }

  // --- chips and reveal ------------------------------------------------------------

  const popover = $("popover");
  function showPopover(anchor, text) {
    popover.textContent = text;
    popover.hidden = false;
    const r = anchor.getBoundingClientRect();
    popover.style.left = `${Math.max(8, r.left + window.scrollX)}px`;
    popover.style.top = `${r.bottom + window.scrollY + 6}px`;
  }
  document.addEventListener("click", (e) => {
    if (!e.target.closest || !e.target.closest(".pii")) popover.hidden = true;
  });

  function tokenKind(token) {
    const label = token.slice(1, token.lastIndexOf("-"));
    return CONFIG.tokenKinds[label] || label;
  }

  function refusalText() {
    return `${(snapshot && snapshot.reveal_refusal) || T.revealRefused} ${T.revealNotYours}`;
  }

  function makeChip(token) {
    const chip = el("span", "pii", token);
    chip.dataset.token = token;
    chip.tabIndex = 0;
    chip.setAttribute("role", "button");
    const kind = tokenKind(token);
    chip.title = CONFIG.mayReveal ? fmt(T.revealHint, { kind }) : fmt(T.maskedHint, { kind });
    chip.classList.add(CONFIG.mayReveal ? "revealable" : "locked");
    return chip;
  }

  async function onChip(chip) {
    const token = chip.dataset.token;
    if (chip.classList.contains("revealed")) return;
    if (!CONFIG.mayReveal) {
      showPopover(chip, refusalText());
      return;
    }
    try {
      const r = await api(CONFIG.revealUrl, { method: "POST", body: JSON.stringify({ token }) });
      for (const same of document.querySelectorAll(".pii")) {
        if (same.dataset.token === token) {
          same.textContent = r.original;
          same.title = fmt(T.revealedHint, { token });
          same.classList.add("revealed");
        }
      }
    } catch (e) {
      chip.title = e.message || T.revealRefused;
      showPopover(chip, e.message || T.revealRefused);
    }
  }
  log.addEventListener("click", (e) => {
    const chip = e.target.closest && e.target.closest(".pii");
    if (chip) onChip(chip);
  });
  log.addEventListener("keydown", (e) => {
    const chip = e.target.closest && e.target.closest(".pii");
    if (chip && (e.key === "Enter" || e.key === " ")) {
      e.preventDefault();
      onChip(chip);
    }
  });

  OwlRender.configure({ tokenLabels: Object.keys(CONFIG.tokenKinds), makeChip });

  // --- the snapshot ------------------------------------------------------------------

  const answers = {};
  function answer(turnId, meta) {
    let node = answers[turnId];
    if (!node) {
      node = el("div", "row assistant");
      node.dataset.turn = turnId;
      node.appendChild(el("div", "meta"));
      node.appendChild(el("div", "answer-body"));
      log.appendChild(node);
      answers[turnId] = node;
    }
    if (meta && meta.model) {
      const tier = CONFIG.tierLabels[meta.tier] || meta.tier || "";
      node.querySelector(".meta").textContent = tier ? `${meta.model} · ${tier}` : meta.model;
    }
    return node.querySelector(".answer-body");
  }

  function step(item) {
    const details = el("details", "step " + (item.finished ? `outcome-${item.outcome}` : "running"));
    const summary = el("summary");
    summary.appendChild(el("span", "step-icon", item.finished ? (item.outcome === "success" ? "✓" : "!") : ""));
    summary.appendChild(el("span", "step-tool", T.tools[item.tool] || item.tool || "?"));
    if (item.resource) summary.appendChild(el("span", "step-resource", item.resource));
    if (item.outcome) summary.appendChild(el("span", `badge outcome-${item.outcome}`, T.outcomes[item.outcome] || item.outcome));
    if (item.row_count !== null && item.row_count !== undefined) {
      summary.appendChild(el("span", "step-rows", fmt(item.row_count === 1 ? T.rows.one : T.rows.other, { count: item.row_count })));
    }
    details.appendChild(summary);
    const content = el("div", "step-body");
    const input = item.sql !== undefined ? item.sql : item.query;
    if (input !== undefined) {
      content.appendChild(el("div", "step-label", item.sql !== undefined ? T.sql : T.query));
      const pre = el("pre", "step-input");
      pre.appendChild(OwlRender.textWithChips(String(input)));
      content.appendChild(pre);
    }
    if (item.reason) {
      content.appendChild(el("div", "step-label", T.reason));
      const reason = el("div", "step-reason");
      reason.appendChild(OwlRender.textWithChips(String(item.reason)));
      content.appendChild(reason);
    }
    if (item.result && item.outcome === "success") {
      content.appendChild(el("div", "step-label", T.result));
      content.appendChild(OwlRender.toolResult(item.result));
    }
    details.appendChild(content);
    return details;
  }

  function render(items) {
    log.replaceChildren();
    for (const item of items) {
      if (item.role === "user") {
        const row = el("div", "row user");
        const bubble = el("div", "bubble user");
        bubble.appendChild(OwlRender.textWithChips(String(item.content || "")));
        row.appendChild(bubble);
        log.appendChild(row);
      } else if (item.role === "assistant") {
        const block = el("div", "text markdown");
        block.appendChild(OwlRender.markdown(item.content || ""));
        answer(item.turn_id, { model: item.model, tier: item.tier }).appendChild(block);
      } else if (item.role === "step") {
        answer(item.turn_id).appendChild(step(item));
      } else if (item.role === "status") {
        const note = el("div", `status status-${item.status}`);
        note.appendChild(OwlRender.textWithChips(String(item.content || (item.status === "cancelled" ? T.stopped : T.failed))));
        answer(item.turn_id).appendChild(note);
      }
    }
  }

  async function load() {
    try {
      snapshot = await api(CONFIG.apiUrl);
    } catch (e) {
      log.replaceChildren(el("p", "shared-gone", e.status === 404 ? T.gone : e.message));
      $("shared-fork").hidden = true;
      return;
    }
    document.title = `${snapshot.title || T.untitled} · OwlAI`;
    $("shared-title").textContent = snapshot.title || T.untitled;
    const tier = $("shared-tier");
    tier.textContent = (T.tierNotice && T.tierNotice[snapshot.tier]) || "";
    tier.className = `tier-notice tier-${snapshot.tier}`;
    $("shared-meta").textContent = `${fmt(T.sharedBy, { owner: snapshot.owner })} · ${fmt(T.expires, {
      time: new Date(snapshot.expires_at).toLocaleString(document.documentElement.lang),
    })}`;
    if (!snapshot.may_reveal) {
      const notice = $("shared-notice");
      notice.textContent = refusalText();
      notice.hidden = false;
    }
    $("shared-fork-hint").textContent = T.forkHint;
    render(snapshot.items);
  }

  $("shared-fork").addEventListener("click", async () => {
    const button = $("shared-fork");
    button.disabled = true;
    showError("");
    try {
      const r = await api(CONFIG.forkUrl, { method: "POST", body: "{}" });
      location.href = r.url;
    } catch (e) {
      button.disabled = false;
      showError(e.message);
    }
  });

  load();
})();
