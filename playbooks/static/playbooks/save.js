/* "Save as playbook" on the chat page: an action on each completed answer
 * that opens the playbook list with that turn's question picked. Loaded by
 * the chat page, it knows it only through the hook event chat.js dispatches
 * ("owlai:answer-rendered"); its words come from /playbooks/page.json. */
(function () {
  "use strict";

  // The pages' style sheet, next to this script (the chat template loads the script only).
  const here = document.currentScript && document.currentScript.src;
  if (here) {
    const sheet = document.createElement("link");
    sheet.rel = "stylesheet";
    sheet.href = new URL("playbooks.css", here).href;
    document.head.appendChild(sheet);
  }

  let setup = null;

  function words() {
    if (!setup) {
      setup = fetch("/playbooks/page.json", { credentials: "same-origin" }).then((r) => {
        if (!r.ok) throw new Error(String(r.status));
        return r.json();
      });
    }
    return setup;
  }

  document.addEventListener("owlai:answer-rendered", async (e) => {
    const { conversationId, turnId, element, status } = e.detail || {};
    if (!conversationId || !element || (status && status !== "completed" && status !== "ended")) return;
    let config;
    try {
      config = await words();
    } catch (err) {
      return; // no action rather than a broken one
    }
    if (element.querySelector(".save-playbook")) return;
    const link = document.createElement("a");
    link.className = "action save-playbook";
    link.textContent = config.saveAsPlaybook;
    link.title = config.saveAsPlaybookHint;
    link.href = `${config.listUrl}?turn=${encodeURIComponent(turnId)}#from-turn`;
    (element.querySelector(".actions") || element).appendChild(link);
  });
})();
