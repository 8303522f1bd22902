/* Small pieces of the chat page that know nothing of conversations or the
 * websocket: the colour theme, copying to the clipboard, times and the
 * sidebar's date groups. chat.js uses them through `OwlUI`.
 */
(function (global) {
  "use strict";

  // --- theme: the system's (prefers-color-scheme) unless the user picked one ---

  const THEMES = ["system", "light", "dark"];
  const THEME_KEY = "owlai-theme";

  function storedTheme() {
    try {
      const value = localStorage.getItem(THEME_KEY);
      return THEMES.includes(value) ? value : "system";
    } catch (e) {
      return "system"; // storage off: follow the system
    }
  }

  function applyTheme(theme) {
    const root = document.documentElement;
    if (theme === "system") delete root.dataset.theme;
    else root.dataset.theme = theme;
  }

  /* The toggle cycles system -> light -> dark; its label names the current one. */
  function themeToggle(button, labels) {
    let theme = storedTheme();
    const show = () => {
      applyTheme(theme);
      button.textContent = labels[theme];
      button.dataset.theme = theme;
    };
    button.addEventListener("click", () => {
      theme = THEMES[(THEMES.indexOf(theme) + 1) % THEMES.length];
      try {
        localStorage.setItem(THEME_KEY, theme);
      } catch (e) { /* kept for this page only */ }
      show();
    });
    show();
  }
  applyTheme(storedTheme()); // as early as this script runs

  // --- clipboard -------------------------------------------------------------------

  /* The Clipboard API where the page is a secure context; else the old
   * selection-and-copy way (an http:// intranet address). */
  async function copyText(text) {
    if (navigator.clipboard && global.isSecureContext) {
      await navigator.clipboard.writeText(text);
      return;
    }
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "offscreen";
    document.body.appendChild(area);
    area.select();
    const ok = document.execCommand("copy");
    area.remove();
    if (!ok) throw new Error("copy refused");
  }

  /* A button that copies `getText()` and says so for a moment. */
  function copyButton(className, labels, getText) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = className;
    button.textContent = labels.copy;
    button.title = labels.copy;
    button.addEventListener("click", async (e) => {
      e.stopPropagation();
      try {
        await copyText(getText());
        button.textContent = labels.copied;
      } catch (err) {
        button.textContent = labels.copyFailed;
      }
      setTimeout(() => {
        button.textContent = labels.copy;
      }, 1500);
    });
    return button;
  }

  // --- times -----------------------------------------------------------------------

  function sameDay(a, b) {
    return a.getFullYear() === b.getFullYear() && a.getMonth() === b.getMonth() && a.getDate() === b.getDate();
  }

  /* A <time>: the hour today, the date and hour before; the full date on hover. */
  function timeElement(iso) {
    const at = iso ? new Date(iso) : new Date();
    const lang = document.documentElement.lang || undefined;
    const el = document.createElement("time");
    el.className = "stamp";
    el.dateTime = at.toISOString();
    const short = sameDay(at, new Date())
      ? { hour: "2-digit", minute: "2-digit" }
      : { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" };
    el.textContent = new Intl.DateTimeFormat(lang, short).format(at);
    el.title = new Intl.DateTimeFormat(lang, { dateStyle: "full", timeStyle: "short" }).format(at);
    return el;
  }

  /* The sidebar's group of a conversation last active at `iso`: today,
   * yesterday, the previous 7 or 30 days, else its month. */
  function dateGroup(iso, labels, now = new Date()) {
    const at = new Date(iso);
    const startOfToday = new Date(now.getFullYear(), now.getMonth(), now.getDate());
    // Rounded: a day across a daylight-saving change is 23 or 25 hours long.
    const days = Math.round((startOfToday - new Date(at.getFullYear(), at.getMonth(), at.getDate())) / 86400000);
    if (days <= 0) return { key: "today", label: labels.today };
    if (days === 1) return { key: "yesterday", label: labels.yesterday };
    if (days <= 7) return { key: "week", label: labels.week };
    if (days <= 30) return { key: "month", label: labels.month };
    const lang = document.documentElement.lang || undefined;
    const label = new Intl.DateTimeFormat(lang, { year: "numeric", month: "long" }).format(at);
    return { key: `${at.getFullYear()}-${at.getMonth()}`, label };
  }

  global.OwlUI = { themeToggle, copyText, copyButton, timeElement, dateGroup };
})(window);
