// The language switcher submits as soon as a language is chosen.
document.querySelectorAll("form.language-switcher select").forEach((select) => {
  select.addEventListener("change", () => select.form.submit());
  const button = select.form.querySelector(".switch");
  if (button) button.hidden = true;
});
