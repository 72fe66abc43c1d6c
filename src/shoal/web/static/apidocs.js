// Starts Swagger UI on /docs (src/shoal/api/apidocs.py): here, not in the page, because the
// page's Content-Security-Policy allows no inline script. The options are FastAPI's defaults.
const root = document.getElementById("swagger-ui");
window.SwaggerUIBundle({
  url: root.dataset.openapi,
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  presets: [window.SwaggerUIBundle.presets.apis, window.SwaggerUIBundle.SwaggerUIStandalonePreset],
});
