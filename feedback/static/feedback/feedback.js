/* Thumbs up / down under each answer of the chat page, with optional tags,
 * a comment and the conversation attached. Knows the page only through the
 * hook events of chat.js ("owlai:conversation-opened",
 * "owlai:answer-rendered" with the answer's element), and the feedback API.
 * Built with createElement/textContent only. */
(function () {
  "use strict";

  // Its own style sheet, next to this script (the chat template loads the script only).
  const here = document.currentScript && document.currentScript.src;
  if (here) {
    const sheet = document.createElement("link");
    sheet.rel = "stylesheet";
    sheet.href = new URL("feedback.css", here).href;
    document.head.appendChild(sheet);
  }

  let setup = null;
  let config = null;
  let given = {}; // turn id -> feedback given in this conversation
  let current = null;

  const csrf = () => {
    const m = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    if (m) return decodeURIComponent(m[1]);
    const input = document.querySelector("[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  };

  function el(tag, className, content) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (content !== undefined && content !== null) node.textContent = content;
    return node;
  }

  async function json(url, options = {}) {
    const response = await fetch(url, {
      credentials: "same-origin",
      ...options,
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf() },
    });
    const body = await response.json().catch(() => null);
    if (!response.ok) throw new Error((body && body.detail) || String(response.status));
    return body;
  }

  function loadConfig() {
    if (!setup) setup = json("/feedback/page.json").then((r) => (config = r));
    return setup;
  }

  function markBar(bar, rating) {
    for (const b of bar.querySelectorAll(".feedback-thumb")) {
      b.classList.toggle("chosen", b.dataset.rating === rating);
      b.setAttribute("aria-pressed", b.dataset.rating === rating ? "true" : "false");
    }
  }

  function openForm(bar, conversationId, turnId, rating) {
    const T = config.text;
    const old = bar.parentElement.querySelector(".feedback-form");
    if (old) old.remove();
    const before = given[turnId] && given[turnId].rating === rating ? given[turnId] : null;
    const form = el("form", "feedback-form");
    form.appendChild(el("div", "feedback-label", T.tags));
    const tags = el("div", "feedback-tags");
    for (const [id, label] of config.tags[rating]) {
      const wrap = el("label", "feedback-tag");
      const box = el("input");
      box.type = "checkbox";
      box.value = id;
      box.checked = !!(before && before.tags.includes(id));
      wrap.appendChild(box);
      wrap.appendChild(document.createTextNode(" " + label));
      tags.appendChild(wrap);
    }
    form.appendChild(tags);
    const comment = el("textarea", "feedback-comment");
    comment.rows = 2;
    comment.maxLength = 2000;
    comment.placeholder = T.comment;
    comment.setAttribute("aria-label", T.comment);
    comment.value = before ? before.comment : "";
    form.appendChild(comment);
    const attachLabel = el("label", "feedback-attach");
    const attach = el("input");
    attach.type = "checkbox";
    attach.checked = !!(before && before.attach_conversation);
    attachLabel.appendChild(attach);
    attachLabel.appendChild(document.createTextNode(" " + T.attach));
    attachLabel.title = T.attachHint;
    form.appendChild(attachLabel);
    form.appendChild(el("div", "feedback-note", T.attachHint));
    const error = el("div", "composer-error");
    error.setAttribute("role", "alert");
    error.hidden = true;
    form.appendChild(error);
    const buttons = el("div", "confirm-buttons");
    const cancel = el("button", null, T.cancel);
    cancel.type = "button";
    cancel.addEventListener("click", () => form.remove());
    const send = el("button", "primary", T.send);
    send.type = "submit";
    buttons.appendChild(cancel);
    buttons.appendChild(send);
    form.appendChild(buttons);
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      send.disabled = true;
      try {
        const saved = await json(`/api/conversations/${conversationId}/turns/${turnId}/feedback/`, {
          method: "PUT",
          body: JSON.stringify({
            rating,
            tags: [...tags.querySelectorAll("input:checked")].map((b) => b.value),
            comment: comment.value,
            attach_conversation: attach.checked,
          }),
        });
        given[turnId] = saved;
        markBar(bar, rating);
        form.replaceChildren(el("div", "feedback-thanks", T.thanks));
        setTimeout(() => form.remove(), 2500);
      } catch (err) {
        error.textContent = err.message || T.failed;
        error.hidden = false;
        send.disabled = false;
      }
    });
    bar.after(form);
    comment.focus();
  }

  // Thumb icons as SVG built here (an emoji font is not on every machine).
  const THUMB = "M2 10h4v11H2zM8 21h9.3a2 2 0 0 0 2-1.6l1.5-7A2 2 0 0 0 18.8 10H14l.8-4.2A2.1 2.1 0 0 0 12.7 3L8 9.5z";
  function thumbIcon(down) {
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("viewBox", "0 0 24 24");
    svg.setAttribute("width", "16");
    svg.setAttribute("height", "16");
    svg.setAttribute("aria-hidden", "true");
    if (down) svg.setAttribute("transform", "rotate(180)");
    const path = document.createElementNS(ns, "path");
    path.setAttribute("d", THUMB);
    path.setAttribute("fill", "none");
    path.setAttribute("stroke", "currentColor");
    path.setAttribute("stroke-width", "1.8");
    path.setAttribute("stroke-linejoin", "round");
    svg.appendChild(path);
    return svg;
  }

  function addBar(detail) {
    const { conversationId, turnId, element } = detail;
    if (!conversationId || !element || element.querySelector(".feedback-bar")) return;
    const T = config.text;
    const bar = el("div", "feedback-bar");
    for (const [rating, label] of [["up", T.up], ["down", T.down]]) {
      const b = el("button", "icon feedback-thumb");
      b.appendChild(thumbIcon(rating === "down"));
      b.type = "button";
      b.dataset.rating = rating;
      b.title = label;
      b.setAttribute("aria-label", label);
      b.addEventListener("click", () => openForm(bar, conversationId, turnId, rating));
      bar.appendChild(b);
    }
    element.appendChild(bar);
    if (given[turnId]) markBar(bar, given[turnId].rating);
  }

  document.addEventListener("owlai:conversation-opened", (e) => {
    const id = e.detail && e.detail.conversationId;
    current = id;
    given = {};
    if (!id) return;
    const loading = Promise.all([loadConfig(), json(`/api/conversations/${id}/feedback/`).catch(() => [])]);
    loading.then(([, items]) => {
      if (current !== id) return;
      for (const f of items) given[f.turn_id] = f;
      for (const bar of document.querySelectorAll(".feedback-bar")) {
        const row = bar.closest("[data-turn]");
        if (row && given[row.dataset.turn]) markBar(bar, given[row.dataset.turn].rating);
      }
    });
  });

  document.addEventListener("owlai:answer-rendered", async (e) => {
    try {
      await loadConfig();
    } catch (err) {
      return;
    }
    addBar(e.detail);
  });
})();
