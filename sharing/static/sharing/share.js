/* The chat page's "Share" button and dialog. Loaded by the chat page, but
 * knows it only through the hook events chat.js dispatches
 * ("owlai:conversation-opened"): a button in the header, a <dialog> built
 * here, the sharing API. The owner picks the last message shown and how
 * long the link stays open, and gets the address to copy. */
(function () {
  "use strict";

  // Its own style sheet, next to this script (the chat template loads the script only).
  const here = document.currentScript && document.currentScript.src;
  if (here) {
    const sheet = document.createElement("link");
    sheet.rel = "stylesheet";
    sheet.href = new URL("sharing.css", here).href;
    document.head.appendChild(sheet);
  }

  let conversationId = null;
  let text = null;
  let setup = null;
  let button = null;
  let dialog = null;

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

  function loadText() {
    if (!setup) {
      setup = json("/shared-links/page.json").then((r) => {
        text = r;
        return r;
      });
    }
    return setup;
  }

  function ensureButton() {
    if (button) return button;
    const header = document.querySelector("main header");
    if (!header) return null;
    button = el("button", "icon share-button", text.text.share);
    button.type = "button";
    button.id = "share";
    button.title = text.text.shareHint;
    button.addEventListener("click", openDialog);
    header.appendChild(button);
    return button;
  }

  function option(value, label) {
    const o = el("option", null, label);
    o.value = value;
    return o;
  }

  async function openDialog() {
    const T = text.text;
    if (!conversationId) return;
    if (!dialog) {
      dialog = el("dialog", "share-dialog");
      dialog.id = "share-dialog";
      document.body.appendChild(dialog);
    }
    const form = el("form");
    form.method = "dialog";
    form.appendChild(el("h3", null, T.title));
    form.appendChild(el("p", "confirm-note", T.explain));
    const upTo = el("select");
    upTo.id = "share-up-to";
    const expiry = el("select");
    expiry.id = "share-expiry";
    for (const days of text.expiryDays) expiry.appendChild(option(days, T.days[String(days)]));
    const rowA = el("label", "share-row", T.upTo + " ");
    rowA.appendChild(upTo);
    const rowB = el("label", "share-row", T.expiresIn + " ");
    rowB.appendChild(expiry);
    form.appendChild(rowA);
    form.appendChild(rowB);
    const result = el("div", "share-row");
    const error = el("div", "composer-error");
    error.setAttribute("role", "alert");
    error.hidden = true;
    const buttons = el("div", "confirm-buttons");
    const create = el("button", "primary", T.create);
    create.type = "button";
    create.id = "share-create";
    const close = el("button", null, T.close);
    close.value = "cancel";
    buttons.appendChild(close);
    buttons.appendChild(create);
    const manage = el("a", "shared-links-link", T.manage);
    manage.href = text.linksPageUrl;
    form.appendChild(result);
    form.appendChild(error);
    form.appendChild(buttons);
    form.appendChild(manage);
    dialog.replaceChildren(form);

    const items = await json(`/api/conversations/${conversationId}/messages/`).catch(() => []);
    // One choice per turn the owner asked in, newest first (a link shows ended turns).
    const asked = items.filter((m) => m.role === "user").reverse();
    for (const m of asked) {
      const words = String(m.content || "").replace(/\s+/g, " ").trim();
      upTo.appendChild(option(m.turn_id, words.length > 60 ? words.slice(0, 60) + "…" : words));
    }
    if (!asked.length) {
      error.textContent = T.nothing;
      error.hidden = false;
      create.disabled = true;
    }
    create.addEventListener("click", async () => {
      error.hidden = true;
      create.disabled = true;
      try {
        const link = await json(`/api/conversations/${conversationId}/share-links/`, {
          method: "POST",
          body: JSON.stringify({ up_to_turn: Number(upTo.value), expires_in_days: Number(expiry.value) }),
        });
        const url = el("input", "share-url");
        url.id = "share-url";
        url.readOnly = true;
        url.value = location.origin + link.url;
        const copy = el("button", null, T.copy);
        copy.type = "button";
        copy.addEventListener("click", async () => {
          url.select();
          try {
            await navigator.clipboard.writeText(url.value);
          } catch (e) {
            document.execCommand("copy");
          }
          copy.textContent = T.copied;
        });
        result.replaceChildren(url, copy);
      } catch (e) {
        error.textContent = e.message;
        error.hidden = false;
      } finally {
        create.disabled = false;
      }
    });
    dialog.showModal();
  }

  document.addEventListener("owlai:conversation-opened", async (e) => {
    conversationId = e.detail && e.detail.conversationId;
    try {
      await loadText();
    } catch (err) {
      return; // no share button without its words
    }
    const b = ensureButton();
    if (b) b.hidden = !conversationId;
  });
})();
