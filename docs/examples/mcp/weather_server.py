"""An MCP server with one tool, written with the official SDK (pip install mcp). The relay starts
it and talks to it over stdio; any MCP server works the same way, over stdio or HTTP."""

from mcp.server.mcpserver import MCPServer

server = MCPServer("weather")


@server.tool()
def get_forecast(city: str) -> dict:
    """Tomorrow's weather in a city."""
    return {"city": city, "sky": "sunny", "temperature_c": 21}


if __name__ == "__main__":
    server.run()
