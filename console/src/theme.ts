// The colour theme: the system's (the default), or light or dark as picked
// in the header and remembered in this browser (localStorage). The pick
// sets `data-theme` on the root element, which sets its `color-scheme`;
// the stylesheet's colours follow that.

export type Theme = "system" | "light" | "dark";

const THEME_KEY = "brainstem.theme";

export function storedTheme(): Theme {
  const value = localStorage.getItem(THEME_KEY);
  return value === "light" || value === "dark" ? value : "system";
}

/** Applies `theme` to the page and remembers it. */
export function applyTheme(theme: Theme): void {
  if (theme === "system") {
    delete document.documentElement.dataset.theme;
    localStorage.removeItem(THEME_KEY);
  } else {
    document.documentElement.dataset.theme = theme;
    localStorage.setItem(THEME_KEY, theme);
  }
}
