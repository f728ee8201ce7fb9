"""LlamaIndex: a FunctionAgent (agent workflow) on OpenAILike with a system prompt and a FunctionTool
built from a typed Python function (LlamaIndex builds the schema with pydantic)."""
import asyncio
import sys

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.llms.openai_like import OpenAILike


def get_weather(city: str, unit: str = "celsius") -> str:
    """Get the current weather in a city (city: e.g. Paris; unit: celsius or fahrenheit)."""
    return f"22 degrees {unit} and sunny in {city}"


async def main() -> None:
    llm = OpenAILike(model="goldens", api_base=sys.argv[1], api_key="x", is_chat_model=True,
                     is_function_calling_model=True, context_window=8192)
    agent = FunctionAgent(tools=[get_weather], llm=llm,
                          system_prompt="You are a helpful weather assistant. Answer briefly.")
    print(await agent.run("What is the weather like in Paris today?"))


asyncio.run(main())
