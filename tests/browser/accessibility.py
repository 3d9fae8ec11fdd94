"""axe-core in a page: the serious and critical WCAG 2.2 AA violations it finds. Its script
comes from the npm package's build that a pinned test dependency carries; nothing is
downloaded."""

from importlib import resources

AXE = resources.files("axe_playwright_python").joinpath("axe.min.js").read_text()
# Run as the page's own script would be refused by its Content-Security-Policy; evaluated by
# the browser's debugging protocol it is not.
AUDIT = """async () => {
  const found = await axe.run(document, {
    runOnly: {type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]},
  });
  return found.violations
    .filter((violation) => ["serious", "critical"].includes(violation.impact))
    .map((violation) => `${violation.id} (${violation.impact}): ` +
         violation.nodes.map((node) => node.target.join(" ")).join(", "));
}"""


def serious_violations(page) -> list[str]:
    page.evaluate(AXE)
    return page.evaluate(AUDIT)
