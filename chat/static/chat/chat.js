/* The chat page. Server-rendered shell (templates/chat/page.html) plus this
 * script: conversations over the JSON API, turns over the websocket
 * (README "Websocket protocol"), rendering through render.js.
 *
 * The database is the truth: on every (re)connect the server sends a `state`
 * frame and the log is rebuilt from it; every turn event carries `turn_id`
 * and `seq`, and a gap (a frame the transport dropped) is filled with a
 * `sync` request. A socket that closes reconnects with backoff; a turn that
 * goes quiet for 5 s gets a `sync` too (its last event may have been lost).
 */
(function () {
  "use strict";

  const CONFIG = JSON.parse(document.getElementById("chat-config").textContent);
  const T = CONFIG.text;
  const $ = (id) => document.getElementById(id);
  const csrf = () => {
    const m = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    if (m) return decodeURIComponent(m[1]);
    const input = document.querySelector("[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  };
  const log = $("log");
  const box = $("text");

  let socket = null;
  let conversation = null; // {id, title, tier, model}
  let conversations = [];
  let models = [];
  let lastSeq = {};
  let syncing = {};
  let retryDelay = 500;
  let retryTimer = null;
  let busy = false;
  let activeTurn = null;
  let stateShown = false;
  let pending = null; // {ref, text, bubble}: sent, not yet taken by the server
  let queuedSend = null; // text to send once the new conversation's socket is up
  let stick = true; // follow new content unless the user scrolled up
  let waitingFor = null; // turn id waiting for the user's approval
  const deciding = {}; // approval id -> decision sent, no answer yet
  const approvalErrors = {}; // approval id -> why the server refused the answer
  const answers = {}; // turn id -> answer element

  // --- hooks for the surfaces above chat (sharing, feedback) ------------------
  // Their scripts listen on `document`; this page knows nothing else of them.
  // "owlai:conversation-opened" {conversationId} when a conversation (or a
  // new one: null) is opened; "owlai:answer-rendered" {conversationId,
  // turnId, element, status} when an answer is shown complete (live, or from
  // the stored conversation).
  function emitHook(name, detail) {
    document.dispatchEvent(new CustomEvent(name, { detail }));
  }
  function answerRendered(turnId, status) {
    const element = answers[turnId];
    if (element) emitHook("owlai:answer-rendered", { conversationId: conversation && conversation.id, turnId: Number(turnId), element, status });
  }
  // --- end of hooks -------------------------------------------------------------

  // --- helpers ---------------------------------------------------------------

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  function fmt(template, values) {
    return template.replace(/%\((\w+)\)s/g, (_, k) => (values[k] === undefined ? "" : String(values[k])));
  }

  function loginUrl() {
    const next = "/" + (conversation ? "#" + conversation.id : "");
    return `${CONFIG.loginUrl}?next=${encodeURIComponent(next)}`;
  }

  /* Keep what the user typed across a page load (restored at start-up). */
  function keepDraft() {
    try {
      if (box.value.trim()) sessionStorage.setItem("owlai-draft", JSON.stringify({ id: conversation && conversation.id, text: box.value }));
    } catch (e) { /* storage off: the text is lost, the page still works */ }
  }

  /* The session is gone: keep what the user typed, sign in, come back here. */
  function toLogin() {
    keepDraft();
    window.location.assign(loginUrl());
  }

  class ApiError extends Error {
    constructor(status, detail) {
      super(detail || String(status));
      this.status = status;
    }
  }

  async function sessionExpired() {
    // The page itself needs a login: an expired session is redirected.
    try {
      const r = await fetch("/", { redirect: "manual", credentials: "same-origin" });
      return r.type === "opaqueredirect" || r.status === 302;
    } catch (e) {
      return false;
    }
  }

  async function api(path, options = {}) {
    const r = await fetch(path, {
      credentials: "same-origin",
      ...options,
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf(), ...(options.headers || {}) },
    });
    if (r.status === 204) return null;
    let body = null;
    try {
      body = await r.json();
    } catch (e) {
      body = null;
    }
    if (!r.ok) {
      if ((r.status === 401 || r.status === 403) && (await sessionExpired())) {
        toLogin();
        throw new ApiError(401, T.sessionExpired);
      }
      const detail = body && (body.detail || (body.title && body.title[0]));
      throw new ApiError(r.status, detail);
    }
    return body;
  }

  function flash(message) {
    const note = $("composer-error");
    note.textContent = message;
    note.hidden = !message;
  }

  // --- scrolling ---------------------------------------------------------------

  function nearBottom() {
    return log.scrollHeight - log.scrollTop - log.clientHeight < 60;
  }
  // Only the user scrolling up unpins the log. A scroll event can arrive after
  // the box shrank (the composer grew in the same frame as our own scroll to
  // the bottom): judged by distance alone it would unpin a log nobody moved.
  let lastTop = 0;
  log.addEventListener("scroll", () => {
    if (nearBottom()) stick = true;
    else if (log.scrollTop < lastTop) stick = false;
    lastTop = log.scrollTop;
    if (stick) $("jump").hidden = true;
  });
  function follow() {
    if (stick) log.scrollTop = log.scrollHeight;
    else $("jump").hidden = false;
  }
  // A log pinned to the bottom stays there when its own box changes size
  // (the header re-laid out after a turn, the composer growing, the window
  // resized): no scroll event comes then, so nothing else would follow.
  if (window.ResizeObserver) {
    new ResizeObserver(() => {
      if (stick) log.scrollTop = log.scrollHeight;
    }).observe(log);
  }
  // Nor when content it did not add itself grows it (the surfaces' hooks add
  // a feedback bar under an answer after it is shown): follow that too.
  if (window.MutationObserver) {
    new MutationObserver(() => {
      if (stick) log.scrollTop = log.scrollHeight;
    }).observe(log, { childList: true, subtree: true });
  }
  $("jump").addEventListener("click", () => {
    stick = true;
    log.scrollTop = log.scrollHeight;
    $("jump").hidden = true;
  });

  // --- token chips ----------------------------------------------------------------

  const popover = $("popover");
  function showPopover(anchor, text) {
    popover.textContent = text;
    popover.hidden = false;
    popover._anchor = anchor;
    placePopover();
  }
  /* Under its chip; it follows the chip as the log scrolls and goes once the
   * chip leaves the log's view (it stayed put over other messages). */
  function placePopover() {
    const anchor = popover._anchor;
    if (popover.hidden || !anchor) return;
    const r = anchor.getBoundingClientRect();
    const view = log.getBoundingClientRect();
    if (!anchor.isConnected || r.bottom < view.top || r.top > view.bottom) {
      popover.hidden = true;
      return;
    }
    const width = Math.min(300, window.innerWidth - 16);
    popover.style.maxWidth = width + "px";
    popover.style.left = Math.max(8, Math.min(r.left, window.innerWidth - width - 8)) + "px";
    popover.style.top = r.bottom + 6 + "px";
  }
  log.addEventListener("scroll", placePopover);
  window.addEventListener("resize", placePopover);
  document.addEventListener("click", (e) => {
    if (!e.target.closest || !e.target.closest(".pii")) popover.hidden = true;
  });

  function tokenKind(token) {
    const label = token.slice(1, token.lastIndexOf("-"));
    return CONFIG.tokenKinds[label] || label;
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
      showPopover(chip, fmt(T.maskedHint, { kind: tokenKind(token) }));
      return;
    }
    if (!conversation) return;
    try {
      const r = await api(`/api/conversations/${conversation.id}/reveal/`, { method: "POST", body: JSON.stringify({ token }) });
      for (const same of document.querySelectorAll(".pii")) {
        if (same.dataset.token === token) {
          same.textContent = r.original;
          same.title = fmt(T.revealedHint, { token });
          same.classList.add("revealed");
        }
      }
    } catch (e) {
      if (e.status === 401) return;
      chip.title = T.revealRefused;
      showPopover(chip, T.revealRefused);
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

  // --- the log ---------------------------------------------------------------------

  function clearLog() {
    log.innerHTML = "";
    for (const k of Object.keys(answers)) delete answers[k];
  }

  function showEmpty() {
    clearLog();
    const empty = el("div", "empty");
    empty.appendChild(el("h2", null, T.emptyTitle));
    empty.appendChild(el("p", null, T.emptyHint));
    log.appendChild(empty);
  }

  const copyLabels = { copy: T.copy, copied: T.copied, copyFailed: T.copyFailed };

  function actionButton(className, label, onClick) {
    const button = el("button", "action " + className, label);
    button.type = "button";
    button.title = label;
    button.addEventListener("click", onClick);
    return button;
  }

  /* A message of the user: the bubble, then when it was sent, Copy and Edit
   * (Edit on the latest message only, see markLatest). */
  function userBubble(text, turnId, at) {
    const row = el("div", "row user");
    const wrap = el("div", "user-wrap");
    const bubble = el("div", "bubble user", text);
    bubble._text = text;
    if (turnId) {
      bubble.dataset.turn = turnId;
      row.dataset.turn = turnId;
    }
    const actions = el("div", "actions");
    actions.append(
      OwlUI.timeElement(at),
      OwlUI.copyButton("action copy", copyLabels, () => bubble._text),
      actionButton("edit", T.edit, () => startEdit(row, bubble)),
    );
    wrap.append(bubble, actions);
    row.appendChild(wrap);
    log.appendChild(row);
    follow();
    return bubble;
  }

  // --- versions: regenerate and edit ------------------------------------------------------

  /* The latest message and answer (outside earlier versions) offer Edit and
   * Regenerate; the server takes a new version of the latest turn only. */
  function markLatest() {
    for (const row of log.querySelectorAll(".row.latest")) row.classList.remove("latest");
    const current = [...log.children].filter((n) => n.classList.contains("row"));
    const lastUser = current.filter((n) => n.classList.contains("user")).pop();
    const lastAnswer = current.filter((n) => n.classList.contains("assistant")).pop();
    if (lastUser && lastUser.dataset.turn) lastUser.classList.add("latest");
    if (lastAnswer && lastUser && lastAnswer.dataset.turn === lastUser.dataset.turn) lastAnswer.classList.add("latest");
  }

  /* Turn `turnId` has a new version: its rows fold into an "earlier version". */
  function supersede(turnId) {
    const rows = [...log.children].filter((n) => n.dataset && n.dataset.turn === String(turnId));
    if (!rows.length) return;
    const box = el("details", "earlier-version");
    box.dataset.turn = turnId;
    box.appendChild(el("summary", null, T.earlierVersion));
    rows[0].before(box);
    for (const row of rows) {
      row.classList.remove("latest");
      box.appendChild(row);
    }
  }

  function startEdit(row, bubble) {
    if (busy || !row.classList.contains("latest")) return;
    const editor = el("div", "editor");
    const area = el("textarea", "edit-text");
    area.value = bubble._text;
    area.setAttribute("aria-label", T.edit);
    const save = actionButton("edit-send primary", T.editSend, () => {
      const text = area.value.trim();
      if (!text) return;
      editor.remove();
      bubble.hidden = false;
      resend(text, Number(row.dataset.turn));
    });
    const cancel = actionButton("edit-cancel", T.cancel, () => {
      editor.remove();
      bubble.hidden = false;
    });
    area.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing && e.keyCode !== 229) {
        e.preventDefault();
        save.click();
      } else if (e.key === "Escape") cancel.click();
    });
    editor.append(area, el("div", "editor-buttons"));
    editor.lastChild.append(cancel, save);
    bubble.hidden = true;
    bubble.after(editor);
    area.focus();
  }

  /* A new version of turn `turnId`: its message again (regenerate) or edited. */
  function resend(text, turnId) {
    if (busy) return;
    if (!socket || socket.readyState !== WebSocket.OPEN) {
      flash(T.notConnected);
      return;
    }
    flash("");
    sendTurn(text, turnId);
  }

  function answerText(turnId) {
    return [...body(turnId).querySelectorAll(".text")].map((b) => b._text || "").join("\n\n");
  }

  function setAnswerTime(turnId, at) {
    const meta = answer(turnId).querySelector(".meta");
    const old = meta.querySelector("time");
    const stamp = OwlUI.timeElement(at);
    if (old) old.replaceWith(stamp);
    else meta.appendChild(stamp);
  }

  /* The answer of one turn: a header (model · tier), then its texts and tool
   * steps in the order they happened, then how it ended. */
  function answer(turnId, meta) {
    let node = answers[turnId];
    if (!node) {
      node = el("div", "row assistant");
      node.dataset.turn = turnId;
      const head = el("div", "meta");
      head.appendChild(el("span", "meta-model"));
      node.appendChild(head);
      node.appendChild(el("div", "answer-body"));
      const actions = el("div", "actions");
      actions.append(
        OwlUI.copyButton("action copy", copyLabels, () => answerText(turnId)),
        actionButton("regenerate", T.regenerate, () => {
          const row = log.querySelector(`.row.user.latest[data-turn="${turnId}"]`);
          if (row && node.classList.contains("latest")) resend(row.querySelector(".bubble")._text, Number(turnId));
        }),
      );
      node.appendChild(actions);
      log.appendChild(node);
      answers[turnId] = node;
    }
    if (meta && meta.model) {
      const tier = CONFIG.tierLabels[meta.tier] || meta.tier || "";
      node.querySelector(".meta-model").textContent = tier ? `${meta.model} · ${tier}` : meta.model;
    }
    return node;
  }

  function body(turnId) {
    return answer(turnId).querySelector(".answer-body");
  }

  function setWorking(turnId, on) {
    const node = answer(turnId);
    let dots = node.querySelector(".working");
    if (on && !dots) {
      dots = el("div", "working");
      dots.setAttribute("role", "status");
      dots.appendChild(el("span", "dot"));
      dots.appendChild(el("span", "dot"));
      dots.appendChild(el("span", "dot"));
      dots.appendChild(el("span", "sr-only", T.working));
      node.appendChild(dots);
    } else if (!on && dots) {
      dots.remove();
    }
  }

  // Text blocks re-render (markdown) at most once a frame while streaming.
  const dirty = new Set();
  let frame = 0;
  function renderSoon(block) {
    dirty.add(block);
    if (!frame) {
      frame = requestAnimationFrame(() => {
        frame = 0;
        for (const b of dirty) renderBlock(b);
        dirty.clear();
        follow();
      });
    }
  }
  function renderBlock(block) {
    block.replaceChildren(OwlRender.markdown(block._text || ""));
    for (const pre of block.querySelectorAll("pre")) {
      const code = pre.querySelector("code");
      const labels = { ...copyLabels, copy: T.copyCode };
      pre.prepend(OwlUI.copyButton("copy-code", labels, () => (code && code._raw !== undefined ? code._raw : pre.textContent)));
    }
  }

  function currentText(turnId, create) {
    const b = body(turnId);
    const last = b.lastElementChild;
    if (last && last.classList.contains("text") && !last._closed) return last;
    if (!create) return null;
    const block = el("div", "text markdown");
    block._text = "";
    b.appendChild(block);
    return block;
  }

  function addText(turnId, text, meta) {
    if (!text) return;
    answer(turnId, meta);
    const block = currentText(turnId, true);
    block._text = text;
    block._closed = true;
    renderBlock(block);
    follow();
  }

  // --- tool steps ---------------------------------------------------------------------

  function stepSummary(step) {
    const summary = el("summary");
    summary.appendChild(el("span", "step-icon", step.finished ? (step.outcome === "success" ? "✓" : "!") : ""));
    summary.appendChild(el("span", "step-tool", T.tools[step.tool] || step.tool || "?"));
    if (step.resource) summary.appendChild(el("span", "step-resource", step.resource));
    if (step.finished) {
      summary.appendChild(el("span", `badge outcome-${step.outcome}`, T.outcomes[step.outcome] || step.outcome));
      if (step.row_count !== null && step.row_count !== undefined) {
        const form = step.row_count === 1 ? T.rows.one : T.rows.other;
        summary.appendChild(el("span", "step-rows", fmt(form, { count: step.row_count })));
      }
      if (step.duration_ms !== undefined) summary.appendChild(el("span", "step-time", fmt(T.duration, { ms: step.duration_ms })));
    } else {
      summary.appendChild(el("span", "badge running", T.running));
    }
    return summary;
  }

  function fillStep(details, step) {
    details.className = "step " + (step.finished ? `outcome-${step.outcome}` : "running");
    details.dataset.callId = step.call_id || "";
    const content = el("div", "step-body");
    const input = step.sql !== undefined ? step.sql : step.query;
    if (input !== undefined) {
      content.appendChild(el("div", "step-label", step.sql !== undefined ? T.sql : T.query));
      const pre = el("pre", "step-input");
      pre.appendChild(OwlRender.textWithChips(input + (step.input_truncated ? " …" : "")));
      content.appendChild(pre);
    }
    if (step.reason) {
      content.appendChild(el("div", "step-label", T.reason));
      const reason = el("div", "step-reason");
      reason.appendChild(OwlRender.textWithChips(step.reason));
      content.appendChild(reason);
    }
    if (step.finished && step.result && step.outcome === "success") {
      content.appendChild(el("div", "step-label", T.result));
      content.appendChild(OwlRender.toolResult(step.result));
      if (step.result_truncated) content.appendChild(el("div", "step-note", T.resultTruncated));
    }
    details.replaceChildren(stepSummary(step), content);
  }

  function upsertStep(turnId, data) {
    const b = body(turnId);
    const last = currentText(turnId, false);
    if (last) last._closed = true; // text after this step is a new block
    let details = data.call_id ? b.querySelector(`details[data-call-id="${CSS.escape(data.call_id)}"]`) : null;
    const before = details ? details._step : {};
    const step = { ...before, ...data };
    if (before.approval && data.approval) step.approval = { ...before.approval, ...data.approval };
    if (!details) {
      details = el("details");
      b.appendChild(details);
    }
    details._step = step;
    const open = details.open;
    fillStep(details, step);
    details.open = open;
    renderApproval(details, step.approval);
    follow();
  }

  // --- approvals -------------------------------------------------------------------------
  // A connector call that needs the user's approval: what it would run with
  // (arguments as text, tokens as chips: never parsed as HTML), a countdown
  // to its expiry and three answers; once decided, the outcome in words.
  // The panel sits right under the call's step, outside the collapsed
  // <details>, so it is seen without opening anything.

  const A = T.approval;
  const ANSWERS = [
    ["approve", A.approve, "approve primary"],
    ["always_allow", A.alwaysAllow, "always-allow"],
    ["deny", A.deny, "deny danger"],
  ];

  function clock(seconds) {
    const s = Math.max(0, Math.ceil(seconds));
    return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
  }

  function argumentsText(value) {
    if (typeof value === "string") return value;
    try {
      return JSON.stringify(value, null, 2);
    } catch (e) {
      return String(value);
    }
  }

  function manageLink() {
    const link = el("a", "approval-manage", A.manage);
    link.href = CONFIG.alwaysAllowedUrl;
    link.target = "_blank";
    link.rel = "noopener";
    return link;
  }

  function renderApproval(details, approval) {
    let panel = details._approvalPanel;
    if (!approval || (!approval.decision && !approval.approval_id)) {
      if (panel) panel.remove();
      details._approvalPanel = null;
      return;
    }
    const id = approval.approval_id || "";
    const state = approval.decision ? "decided:" + approval.decision : "pending";
    const key = `${id}|${state}|${deciding[id] || ""}|${approvalErrors[id] || ""}`;
    if (panel && panel._key === key) return; // unchanged: keep its countdown
    const fresh = el("div", "approval");
    fresh._key = key;
    fresh.dataset.approvalId = id;
    fresh.dataset.callId = details.dataset.callId || "";
    if (panel) panel.replaceWith(fresh);
    else details.after(fresh);
    details._approvalPanel = fresh;
    panel = fresh;

    const tool = T.tools[approval.tool] || approval.tool || (details._step && details._step.tool) || "";
    if (approval.decision) {
      panel.classList.add("decided", `decision-${approval.decision}`);
      const outcome = el("div", "approval-outcome", A.decisions[approval.decision] || approval.decision);
      outcome.setAttribute("role", "status");
      panel.appendChild(outcome);
      if (approval.decision === "always_allowed" || approval.decision === "auto_approved") panel.appendChild(manageLink());
    } else {
      panel.classList.add("pending");
      const titleId = `approval-title-${id}`;
      panel.setAttribute("role", "group");
      panel.setAttribute("aria-labelledby", titleId);
      const title = el("div", "approval-title", A.title);
      title.id = titleId;
      panel.appendChild(title);
      panel.appendChild(el("div", "approval-what", fmt(A.explain, { tool, connector: approval.connector || "" })));
      const args = el("pre", "approval-args");
      args.appendChild(OwlRender.textWithChips(argumentsText(approval.arguments)));
      panel.appendChild(args);
      const countdown = el("div", "approval-countdown");
      countdown.setAttribute("role", "timer");
      panel.appendChild(countdown);
      const buttons = el("div", "approval-buttons");
      for (const [decision, label, cls] of ANSWERS) {
        const button = el("button", `approval-answer ${cls}`, label);
        button.type = "button";
        button.dataset.decision = decision;
        if (decision === "always_allow") button.title = A.alwaysAllowHint;
        button.disabled = !!deciding[id];
        button.addEventListener("click", () => decide(id, decision));
        buttons.appendChild(button);
      }
      panel.appendChild(buttons);
      if (deciding[id]) panel.appendChild(el("div", "approval-sending", A.sending));
      panel.appendChild(manageLink());
      // Counted from what the server says is left, not from the browser's clock.
      const left = Number(approval.expires_in);
      panel._deadline = Date.now() + (Number.isFinite(left) ? left : 0) * 1000;
      tick(panel);
    }
    if (approvalErrors[id]) {
      const error = el("div", "approval-error", approvalErrors[id]);
      error.setAttribute("role", "alert");
      panel.appendChild(error);
    }
  }

  function tick(panel) {
    const countdown = panel.querySelector(".approval-countdown");
    if (!countdown) return;
    const left = (panel._deadline - Date.now()) / 1000;
    if (left > 0) {
      countdown.textContent = fmt(A.expiresIn, { time: clock(left) });
    } else {
      countdown.textContent = A.expiredWaiting;
      panel.classList.add("timed-out");
      for (const b of panel.querySelectorAll(".approval-answer")) b.disabled = true;
    }
  }
  setInterval(() => {
    for (const panel of log.querySelectorAll(".approval.pending")) tick(panel);
  }, 1000);

  function panelFor(approvalId) {
    for (const details of log.querySelectorAll("details.step")) {
      if (details._step && details._step.approval && details._step.approval.approval_id === approvalId) return details;
    }
    return null;
  }

  function redrawApproval(approvalId) {
    const details = panelFor(approvalId);
    if (details) renderApproval(details, details._step.approval);
  }

  /* A turn that ended while its call still waited (the user pressed Stop):
   * the pending call was denied with it (README "Websocket protocol"). */
  function closeApprovals(turnId) {
    for (const details of body(turnId).querySelectorAll("details.step")) {
      const approval = details._step && details._step.approval;
      if (approval && approval.approval_id && !approval.decision) {
        upsertStep(turnId, { call_id: details._step.call_id, approval: { decision: "denied" } });
      }
    }
  }

  function decide(approvalId, decision) {
    delete approvalErrors[approvalId];
    if (!socket || socket.readyState !== WebSocket.OPEN) {
      approvalErrors[approvalId] = T.notConnected;
      redrawApproval(approvalId);
      return;
    }
    deciding[approvalId] = decision;
    redrawApproval(approvalId);
    socket.send(JSON.stringify({ type: "approval.decide", approval_id: approvalId, decision, ref: "approval:" + approvalId }));
  }

  function addStatus(turnId, status, reason) {
    const b = body(turnId);
    const text = status === "cancelled" ? T.stopped : status === "rejected" ? fmt(T.rejected, { reason }) : reason || T.failed;
    const note = el("div", `status status-${status}`);
    note.appendChild(OwlRender.textWithChips(text));
    b.appendChild(note);
    follow();
  }

  // --- state and events --------------------------------------------------------------

  function showTimeline(items) {
    clearLog();
    for (const m of items) {
      if (m.role === "user") {
        if (m.supersedes) supersede(m.supersedes);
        userBubble(m.content, m.turn_id, m.at);
      } else if (m.role === "assistant") {
        addText(m.turn_id, m.content, { model: m.model, tier: m.tier });
        if (m.at) setAnswerTime(m.turn_id, m.at);
      } else if (m.role === "step") upsertStep(m.turn_id, m);
      else if (m.role === "status") addStatus(m.turn_id, m.status, m.content);
    }
    for (const turnId of Object.keys(answers)) closeApprovals(turnId); // these turns have ended
    for (const turnId of Object.keys(answers)) answerRendered(turnId, "ended"); // hook
  }

  function showState(st) {
    retryDelay = 500;
    lastSeq = {};
    syncing = {};
    $("reconnecting").hidden = true;
    waitingFor = null;
    showTimeline(st.messages);
    setBusy(false, null);
    if (st.turn) {
      lastSeq[st.turn.turn_id] = 0;
      const working = st.turn.status === "queued" || st.turn.status === "running";
      // A turn waiting for an approval is still going: Stop ends it.
      const live = working || st.turn.status === "waiting_approval";
      if (live) setBusy(true, st.turn.turn_id);
      for (const ev of st.turn.events) apply(ev);
      if (working) setWorking(st.turn.turn_id, true);
      if (st.turn.finished_at && answers[st.turn.turn_id]) setAnswerTime(st.turn.turn_id, st.turn.finished_at);
    }
    if (pending) log.appendChild(pending.row); // still waiting for the server
    markLatest();
    stick = true;
    follow();
    if (stateShown) {
      loadConversations();
      loadModels();
    }
    stateShown = true;
    if (queuedSend !== null) {
      const text = queuedSend;
      queuedSend = null;
      sendTurn(text);
    }
  }

  function handle(ev) {
    lastFrameAt = Date.now();
    if (ev.type === "state") {
      showState(ev);
      return;
    }
    if (ev.seq === undefined) {
      direct(ev);
      return;
    }
    const last = lastSeq[ev.turn_id] || 0;
    if (ev.seq <= last) return; // already shown (replayed or duplicated)
    if (ev.seq > last + 1) {
      // Missed something: ask for the rest; the replay includes this one.
      if (!syncing[ev.turn_id] && socket) {
        syncing[ev.turn_id] = true;
        socket.send(JSON.stringify({ type: "sync", turn_id: ev.turn_id, after_seq: last }));
      }
      return;
    }
    syncing[ev.turn_id] = false;
    apply(ev);
  }

  /* Frames for this socket only (no seq): acks and frame errors. */
  function direct(ev) {
    if (ev.type === "turn.started") {
      if (pending && ev.ref === pending.ref) {
        pending.bubble.classList.remove("pending");
        pending.bubble.dataset.turn = ev.turn_id;
        pending.row.dataset.turn = ev.turn_id;
        if (ev.supersedes) supersede(ev.supersedes);
        if (box.value === pending.text && !pending.supersedes) box.value = "";
        autosize();
        pending = null;
      }
      setBusy(true, ev.turn_id);
      answer(ev.turn_id);
      setWorking(ev.turn_id, true);
      markLatest();
      follow();
      loadConversations(); // a first message has just titled it
      return;
    }
    if (ev.type === "error") {
      if (typeof ev.ref === "string" && ev.ref.startsWith("approval:")) {
        // The answer was not taken (already answered, expired): said at the request.
        const approvalId = ev.ref.slice("approval:".length);
        delete deciding[approvalId];
        approvalErrors[approvalId] = ev.message;
        redrawApproval(approvalId);
        return;
      }
      if (ev.code === "cancel_refused") setBusy(false, null);
      if (pending && (ev.ref === pending.ref || ev.code === "turn_refused")) {
        // Not taken: the message is not shown as sent, its text stays in the box.
        pending.row.remove();
        pending = null;
        setBusy(false, null);
      }
      flash(ev.message);
    }
  }

  function apply(ev) {
    if (ev.seq !== undefined) lastSeq[ev.turn_id] = ev.seq;
    const id = ev.turn_id;
    switch (ev.type) {
      case "turn.accepted":
        answer(id, { model: ev.model, tier: ev.tier });
        if (activeTurn === id || busy) setWorking(id, true);
        break;
      case "turn.rejected":
        addStatus(id, "rejected", ev.reason);
        break;
      case "tool.started":
        upsertStep(id, ev);
        break;
      case "tool.finished":
        upsertStep(id, { ...ev, finished: true });
        break;
      case "approval.requested": {
        const { type, seq, turn_id, call_id, ...approval } = ev;
        upsertStep(id, { call_id, approval });
        setWorking(id, false); // the turn waits for the user, not for the model
        waitingFor = id;
        break;
      }
      case "approval.decided":
        delete deciding[ev.approval_id];
        upsertStep(id, { call_id: ev.call_id, approval: { approval_id: ev.approval_id, decision: ev.decision } });
        if (waitingFor === id) waitingFor = null;
        if (activeTurn === id || busy) setWorking(id, true);
        break;
      case "message.delta": {
        const block = currentText(id, true);
        block._text += ev.text;
        renderSoon(block);
        break;
      }
      case "message.completed": {
        const block = currentText(id, !!ev.text);
        if (block) {
          block._text = ev.text;
          block._closed = true;
          renderBlock(block);
        }
        follow();
        break;
      }
      case "error":
        addStatus(id, "failed", ev.message);
        break;
      case "turn.finished":
        if (waitingFor === id) waitingFor = null;
        closeApprovals(id);
        if (ev.status === "cancelled") addStatus(id, "cancelled");
        setWorking(id, false);
        setAnswerTime(id, null); // now; a replayed state sets the stored time after
        markLatest();
        answerRendered(id, ev.status); // hook
        if (activeTurn === id || activeTurn === null) setBusy(false, null);
        if (stateShown) {
          loadConversations();
          loadModels();
        }
        break;
    }
  }

  // --- sending and stopping -------------------------------------------------------------

  function setBusy(on, turnId) {
    busy = on;
    activeTurn = on ? turnId : null;
    document.body.classList.toggle("busy", on);
    const send = $("send");
    send.classList.toggle("stop", on);
    send.textContent = on ? T.stop : T.send;
    send.title = on ? T.stopHint : T.sendHint;
    send.disabled = false;
  }

  function autosize() {
    box.style.height = "auto";
    box.style.height = Math.min(box.scrollHeight, 220) + "px";
  }
  box.addEventListener("input", () => {
    autosize();
    flash("");
  });

  let refCounter = 0;
  /* `supersedes`: the turn this is a new version of (regenerate, edit). */
  function sendTurn(text, supersedes = null) {
    const ref = `r${Date.now().toString(36)}${(refCounter += 1)}`;
    const bubble = userBubble(text);
    pending = { ref, text, bubble, row: bubble.closest(".row"), supersedes };
    pending.bubble.classList.add("pending");
    stick = true;
    follow();
    setBusy(true, null);
    const frame = { type: "turn.start", text, model: $("model").value || null, ref };
    if (supersedes) frame.supersedes = supersedes;
    socket.send(JSON.stringify(frame));
  }

  async function submit() {
    if (busy) {
      stop();
      return;
    }
    const text = box.value.trim();
    if (!text) return;
    flash("");
    // Limits (length, one turn at a time, rate) are the server's to judge: a
    // refusal comes back as an `error` and the text stays in the box.
    if (!conversation) {
      // Created on the first send, titled by the server from this message.
      try {
        const c = await api("/api/conversations/", { method: "POST", body: JSON.stringify({}) });
        queuedSend = text;
        await open(c, { keepComposer: true });
      } catch (e) {
        if (e.status !== 401) flash(T.networkError);
      }
      return;
    }
    if (!socket || socket.readyState !== WebSocket.OPEN) {
      flash(T.notConnected);
      return;
    }
    sendTurn(text);
  }

  function stop() {
    if (!socket || socket.readyState !== WebSocket.OPEN) return;
    const send = $("send");
    send.disabled = true;
    send.textContent = T.stopping;
    socket.send(JSON.stringify(activeTurn ? { type: "turn.cancel", turn_id: activeTurn } : { type: "turn.cancel" }));
  }

  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    submit();
  });
  box.addEventListener("keydown", (e) => {
    // Enter sends, Shift+Enter is a new line; never while an IME composes (Korean).
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing && e.keyCode !== 229) {
      e.preventDefault();
      if (!busy) submit();
    }
  });

  // --- socket ----------------------------------------------------------------------------

  let lastFrameAt = Date.now();
  setInterval(() => {
    // While a turn waits for the user nothing is expected: check less often.
    const quiet = waitingFor !== null ? 30000 : 5000;
    if (busy && socket && socket.readyState === WebSocket.OPEN && Date.now() - lastFrameAt > quiet) {
      lastFrameAt = Date.now();
      socket.send(JSON.stringify({ type: "sync" }));
    }
  }, 1000);

  function disconnect() {
    clearTimeout(retryTimer);
    if (socket) {
      socket.onclose = null;
      socket.close();
      socket = null;
    }
  }

  function connect() {
    const c = conversation;
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(`${scheme}://${location.host}/ws/chat/${c.id}/`);
    socket = ws;
    ws.onmessage = (e) => handle(JSON.parse(e.data));
    ws.onclose = (e) => {
      if (socket !== ws) return;
      socket = null;
      if (e.code === 4401) {
        toLogin();
        return;
      }
      if (e.code === 4403 || e.code === 4404) {
        // Deleted (here or in another tab), or not this user's: start afresh.
        newConversation();
        flash(T.gone);
        loadConversations();
        return;
      }
      $("reconnecting").hidden = false;
      // 0.5 s doubling to 10 s, with jitter so many pages do not return at once.
      retryTimer = setTimeout(() => {
        if (conversation === c) connect();
      }, retryDelay * (0.5 + Math.random()));
      retryDelay = Math.min(retryDelay * 2, 10000);
    };
  }

  // --- conversations ------------------------------------------------------------------------

  /* `fromUrl`: the address already names it (a typed #id, Back/Forward);
   * otherwise opening it adds a history entry, so Back returns here. */
  async function open(c, { keepComposer = false, fromUrl = false } = {}) {
    conversation = c;
    emitHook("owlai:conversation-opened", { conversationId: c.id }); // hook
    if (!fromUrl && location.hash !== "#" + c.id) history.pushState(null, "", "#" + c.id);
    showExport(c);
    disconnect();
    stateShown = false;
    pending = null;
    clearLog();
    setBusy(false, null);
    if (!keepComposer) flash("");
    document.body.classList.remove("drawer-open");
    connect();
    await Promise.all([loadModels(), loadConversations()]);
  }

  function newConversation({ fromUrl = false } = {}) {
    disconnect();
    conversation = null;
    emitHook("owlai:conversation-opened", { conversationId: null }); // hook
    pending = null;
    if (!fromUrl && location.hash) history.pushState(null, "", location.pathname + location.search);
    showExport(null);
    setBusy(false, null);
    showEmpty();
    loadModels();
    renderConversations();
    document.body.classList.remove("drawer-open");
    box.focus();
  }

  async function loadConversations() {
    const query = search.value.trim();
    try {
      const found = await api("/api/conversations/" + (query ? `?q=${encodeURIComponent(query)}` : ""));
      if (query !== search.value.trim()) return conversations; // a newer search is on its way
      conversations = found;
    } catch (e) {
      return conversations;
    }
    renderConversations();
    return conversations;
  }

  // A conversation being renamed: the list is not redrawn under its input
  // (a refresh after a turn would otherwise drop what the user is typing).
  let renaming = null;

  /* Newest first, under date headings (today, yesterday, …). */
  function renderConversations() {
    if (renaming) return;
    const groups = $("conversations");
    groups.replaceChildren();
    // A conversation nobody wrote in yet has no title: not listed.
    const shown = conversations.filter((x) => x.title || (conversation && x.id === conversation.id));
    if (!shown.length && search.value.trim()) groups.appendChild(el("p", "no-matches", T.noMatches));
    let list = null;
    let group = null;
    for (const c of shown) {
      const g = OwlUI.dateGroup(c.updated_at, T.groups);
      if (!list || g.key !== group) {
        group = g.key;
        const section = el("section", "conversation-group");
        section.appendChild(el("h3", "group-label", g.label));
        list = el("ul");
        section.appendChild(list);
        groups.appendChild(section);
      }
      const item = el("li", "conversation" + (conversation && c.id === conversation.id ? " active" : ""));
      item.dataset.id = c.id;
      const link = el("a", "conversation-title", c.title || T.untitled);
      link.href = "#" + c.id;
      link.title = c.title;
      link.addEventListener("click", (e) => {
        e.preventDefault();
        if (!conversation || conversation.id !== c.id) open(c);
      });
      const rename = el("button", "icon rename", "✎");
      rename.type = "button";
      rename.title = T.rename;
      rename.setAttribute("aria-label", T.rename);
      rename.addEventListener("click", () => startRename(item, c));
      const del = el("button", "icon delete", "✕");
      del.type = "button";
      del.title = T.delete;
      del.setAttribute("aria-label", T.delete);
      del.addEventListener("click", () => confirmDelete(c));
      item.append(link, rename, del);
      list.appendChild(item);
    }
  }

  function startRename(item, c) {
    renaming = c.id;
    const input = el("input", "rename-input");
    input.value = c.title;
    input.maxLength = 200;
    input.setAttribute("aria-label", T.rename);
    item.replaceChildren(input);
    input.focus();
    input.select();
    let done = false;
    const finish = async (save) => {
      if (done) return;
      done = true;
      const title = input.value.trim();
      if (save && title && title !== c.title) {
        try {
          const updated = await api(`/api/conversations/${c.id}/`, { method: "PATCH", body: JSON.stringify({ title }) });
          c.title = updated.title;
          if (conversation && conversation.id === c.id) conversation.title = updated.title;
        } catch (e) {
          if (e.status !== 401) flash(e.message || T.networkError);
        }
      }
      renaming = null;
      loadConversations();
    };
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.isComposing && e.keyCode !== 229) {
        e.preventDefault();
        finish(true);
      } else if (e.key === "Escape") {
        finish(false);
      }
    });
    input.addEventListener("blur", () => finish(true));
  }

  function confirmDelete(c) {
    const dialog = $("confirm-delete");
    dialog.querySelector(".confirm-title").textContent = c.title || T.untitled;
    dialog.returnValue = "";
    dialog.onclose = async () => {
      if (dialog.returnValue !== "delete") return;
      // The open conversation's socket is closed by the deletion; this page
      // already knows why.
      if (conversation && conversation.id === c.id) disconnect();
      try {
        await api(`/api/conversations/${c.id}/`, { method: "DELETE" });
      } catch (e) {
        if (e.status !== 401) flash(e.message || T.networkError);
        return;
      }
      if (conversation && conversation.id === c.id) newConversation();
      loadConversations();
    };
    dialog.showModal();
  }

  // --- models ----------------------------------------------------------------------------------

  async function loadModels() {
    try {
      models = await api(conversation ? `/api/conversations/${conversation.id}/models/` : "/api/models/");
    } catch (e) {
      return;
    }
    const select = $("model");
    const chosen = select.value;
    select.replaceChildren();
    for (const m of models) {
      const o = el("option", null, `${m.label} · ${m.tier_label || m.tier}`);
      o.value = m.id;
      select.appendChild(o);
    }
    const fallback = models.find((m) => m.is_default);
    if (conversation && conversation.model) select.value = conversation.model;
    else if (chosen && models.some((m) => String(m.id) === chosen)) select.value = chosen;
    else if (fallback) select.value = fallback.id;
    showModel();
  }

  async function loadMentions() {
    const list = $("mentions");
    list.replaceChildren();
    if (!conversation) return;
    let items = [];
    try {
      items = await api(`/api/conversations/${conversation.id}/mentions/?model=${encodeURIComponent($("model").value)}`);
    } catch (e) {
      return;
    }
    for (const item of items) {
      const b = el("button", "mention", "@" + item.name);
      b.type = "button";
      b.addEventListener("click", () => {
        box.value = `@${item.name} ${box.value}`;
        box.focus();
        autosize();
      });
      list.appendChild(b);
    }
  }

  function showModel() {
    loadMentions();
    const m = models.find((x) => String(x.id) === $("model").value);
    $("demo").hidden = !(m && m.offline_demo);
    const tier = $("tier");
    tier.textContent = m ? T.tierNotice[m.tier] || "" : "";
    tier.className = "tier-notice" + (m ? ` tier-${m.tier}` : "");
    if (conversation && conversation.tier) tier.title = T.tierPinned;
  }
  $("model").addEventListener("change", showModel);

  // --- shell --------------------------------------------------------------------------------------

  $("new").addEventListener("click", () => newConversation());

  // Search: as the user types (a short pause first); Ctrl+K or ⌘K from anywhere.
  const search = $("search");
  let searchTimer = null;
  search.addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(loadConversations, 200);
  });
  search.addEventListener("keydown", (e) => {
    if (e.key === "Escape") {
      search.value = "";
      loadConversations();
      box.focus();
    }
  });
  document.addEventListener("keydown", (e) => {
    if ((e.ctrlKey || e.metaKey) && !e.altKey && (e.key === "k" || e.key === "K")) {
      e.preventDefault();
      document.body.classList.add("drawer-open"); // on a phone the list is a drawer
      search.focus();
      search.select();
    }
  });

  function showExport(c) {
    const menu = $("export");
    menu.hidden = !c;
    menu.open = false;
    if (!c) return;
    $("export-md").href = `/api/conversations/${c.id}/export/`;
    $("export-json").href = `/api/conversations/${c.id}/export/?as=json`;
  }
  for (const link of $("export").querySelectorAll("a")) {
    link.addEventListener("click", () => {
      $("export").open = false;
    });
  }

  OwlUI.themeToggle($("theme"), T.themes);

  /* The address names the conversation: a typed #id, Back and Forward open
   * it (the page used to keep the old one under the new address, and the
   * next message went to the old one). */
  window.addEventListener("hashchange", async () => {
    const id = location.hash.slice(1);
    if (conversation && conversation.id === id) return;
    if (!id) {
      newConversation({ fromUrl: true });
      return;
    }
    let c = conversations.find((x) => x.id === id);
    if (!c) {
      try {
        c = await api(`/api/conversations/${encodeURIComponent(id)}/`);
      } catch (e) {
        c = null;
      }
    }
    if (location.hash.slice(1) !== id) return; // moved on meanwhile
    if (c) await open(c, { fromUrl: true });
    else {
      newConversation({ fromUrl: true });
      flash(T.gone);
    }
  });
  $("menu").addEventListener("click", () => document.body.classList.toggle("drawer-open"));
  $("scrim").addEventListener("click", () => document.body.classList.remove("drawer-open"));
  const language = $("language");
  if (language) {
    language.addEventListener("change", () => {
      // The server renders `next` without the fragment that names the open
      // conversation: come back to it, and to what was typed.
      const next = language.form.querySelector("[name=next]");
      if (next) next.value = location.pathname + location.search + location.hash;
      keepDraft();
      language.form.submit();
    });
  }

  (async () => {
    const draft = (() => {
      try {
        const saved = JSON.parse(sessionStorage.getItem("owlai-draft") || "null");
        sessionStorage.removeItem("owlai-draft");
        return saved;
      } catch (e) {
        return null;
      }
    })();
    const items = await loadConversations();
    const wanted = items.find((c) => "#" + c.id === location.hash);
    if (wanted) await open(wanted, { fromUrl: true });
    else newConversation({ fromUrl: !location.hash });
    if (draft && draft.text && (!draft.id || (conversation && draft.id === conversation.id))) {
      box.value = draft.text;
      autosize();
    }
    box.focus();
  })();
})();
