#!/usr/bin/env python3
"""Writes tests/golden/chat_templates.json: chat templates rendered exactly as Hugging Face transformers'
`apply_chat_template` renders them, for the C++ Jinja interpreter's tests (which need no Python).

    pip install transformers jinja2   # written with transformers 5.25.0, jinja2 3.1.6
    python3 tests/golden/make_chat_template_golden.py

Rendering goes through transformers' own `_compile_jinja_template` (an ImmutableSandboxedEnvironment with
trim_blocks=True, lstrip_blocks=True, the loopcontrols extension, the `{% generation %}` extension, transformers'
own `tojson` filter, the `raise_exception` and `strftime_now` globals and its `dict` and `namespace`), so the
golden is transformers' behaviour, not plain jinja2's.

Each case is
    {"name", "template", "context", "output"}   or   {"name", "template", "context", "error"}
where `context` holds exactly the keyword arguments given to `template.render(**context)` (key order kept), and
`error` is f"{type(e).__name__}: {e}" for a template that fails to compile or to render. Cases that use
`{% generation %}` also carry "generation_spans": the [start, end) spans (in code points of the output) that
transformers' AssistantTracker records for them.

Two kinds of case:
  * family cases: templates written here (our own text, not copied from any model repository) that produce the
    documented prompt formats of common model families, each rendered on several conversations. Their context is
    built the way apply_chat_template builds it (messages normalized by transformers' own helpers: keys whose value
    is None dropped, reasoning aliased; then tools, documents, add_generation_prompt, the tokenizer's special-token
    map, extra kwargs), and is checked against transformers' `render_jinja_template`;
  * feature cases: one Jinja concern each, as compact tables, with contexts of just the variables they use.

No case depends on the clock (`strftime_now` output never reaches a golden) or on the network; the output is
deterministic (json.dumps(ensure_ascii=False, indent=1)).

Second, separate output: tests/golden/hf-chat/, a Hugging Face tokenizer folder as save_pretrained writes it
(tokenizer.json, tokenizer_config.json, chat_template.jinja): make_hf_golden.py's small Llama-3-style BPE
(train_tokenizer("llama3", 512); needs torch and ../shared/data/tinyshakespeare) with <|im_start|> and <|im_end|>
added as special tokens and CHATML_TOOLS_TEMPLATE as its chat template, plus reference.json:
    {"generator", "transformers", "tokenizers", "cases": [{"name", "messages", "tools", "add_generation_prompt",
                                                           "text", "ids"}]}
where `text` is apply_chat_template(tokenize=False) and `ids` is apply_chat_template(tokenize=True)["input_ids"]
(no BOS: apply_chat_template encodes with add_special_tokens=False; special-token text in a message's content,
such as a literal "<|im_end|>", is encoded as that special token). So the C++ side can check
"render + encode without adding special tokens == transformers". Skip it with --no-hf-chat.
"""
import json
import os
import re
import shutil
import sys

import jinja2
import transformers
from transformers.utils.chat_template_utils import (
    _alias_reasoning_fields,
    _compile_jinja_template,
    _normalize_chat_messages,
    _plain_template_data,
    render_jinja_template,
)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "chat_templates.json")
HF_CHAT_DIR = os.path.join(HERE, "hf-chat")

# ---------------------------------------------------------------------------------------------------------------
# Family templates (our own text; they produce the documented prompt formats)
# ---------------------------------------------------------------------------------------------------------------

LLAMA2_TEMPLATE = """\
{#- Llama 2 chat: [INST] turns, an optional <<SYS>> block folded into the first user turn -#}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set system_message = false %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('Roles must alternate between user and assistant, starting with user.') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message %}
            {%- set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}
        {%- else %}
            {%- set content = message['content'] %}
        {%- endif %}
        {{- bos_token + '[INST] ' + content | trim + ' [/INST]' }}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] | trim + ' ' + eos_token }}
    {%- endif %}
{%- endfor %}
"""

# Written in "text mode": literal lines between block tags, relying on trim_blocks / lstrip_blocks.
LLAMA3_TEMPLATE = """\
{{- bos_token }}
{%- for message in messages %}
<|start_header_id|>{{ message['role'] }}<|end_header_id|>

{{ message['content'] | trim }}<|eot_id|>
{%- endfor %}
{%- if add_generation_prompt %}
<|start_header_id|>assistant<|end_header_id|>

{% endif %}
"""

LLAMA31_TOOLS_TEMPLATE = """\
{#- Llama 3.1 style: knowledge/date lines in the system header, JSON tool calls, builtin tools, ipython results -#}
{%- set sys = namespace(text='', start=0) %}
{%- if messages[0]['role'] == 'system' %}
    {%- if messages[0]['content'] is string %}
        {%- set sys.text = messages[0]['content'] %}
    {%- else %}
        {%- set sys.text = messages[0]['content'] | map(attribute='text') | join('\\n') %}
    {%- endif %}
    {%- set sys.start = 1 %}
{%- endif %}
{%- if date_string is not defined %}
    {%- set date_string = strftime_now('%d %b %Y') %}
{%- endif %}
{{- bos_token + '<|start_header_id|>system<|end_header_id|>\\n\\n' }}
{%- if tools is not none or builtin_tools is defined %}
    {{- 'Environment: ipython\\n' }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- 'Tools: ' + builtin_tools | reject('equalto', 'code_interpreter') | join(', ') + '\\n\\n' }}
{%- endif %}
{{- 'Cutting Knowledge Date: December 2023\\nToday Date: ' + date_string + '\\n\\n' }}
{{- sys.text | trim }}
{{- '<|eot_id|>' }}
{%- for message in messages[sys.start:] %}
    {%- if message.role == 'user' and loop.first and tools is not none %}
        {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' }}
        {{- 'You can call the functions below. To call one, answer with JSON only, in the form '
            '{"name": <function name>, "parameters": <object of argument values>}.\\n\\n' }}
        {%- for tool in tools %}
            {{- tool | tojson(indent=4) }}
            {{- '\\n\\n' }}
        {%- endfor %}
        {{- message.content | trim + '<|eot_id|>' }}
    {%- elif message.role in ['user', 'system'] or (message.role == 'assistant' and message.tool_calls is not defined) %}
        {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content | trim + '<|eot_id|>' }}
    {%- elif message.role == 'assistant' %}
        {%- if message.tool_calls | length != 1 %}
            {{- raise_exception('Only one tool call per assistant turn is supported.') }}
        {%- endif %}
        {%- set call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
        {%- if builtin_tools is defined and call.name in builtin_tools %}
            {{- '<|python_tag|>' + call.name + '.call(' }}
            {%- for arg_name, arg_value in call.arguments | items %}
                {{- arg_name + '="' + arg_value + '"' }}
                {%- if not loop.last %}
                    {{- ', ' }}
                {%- endif %}
            {%- endfor %}
            {{- ')<|eom_id|>' }}
        {%- else %}
            {{- '{"name": "' + call.name + '", "parameters": ' }}
            {{- call.arguments if call.arguments is string else call.arguments | tojson }}
            {{- '}<|eot_id|>' }}
        {%- endif %}
    {%- elif message.role in ['tool', 'ipython'] %}
        {{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' }}
        {%- if message.content is mapping or (message.content is iterable and message.content is not string) %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

CHATML_TOOLS_TEMPLATE = """\
{#- ChatML (Qwen2.5 style): default system prompt, tools in <tools></tools>, <tool_call> / <tool_response> -#}
{%- set default_system = 'You are a helpful assistant.' %}
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {{- messages[0].content if messages[0].role == 'system' else default_system }}
    {{- '\\n\\n# Tools\\n\\nYou may call one or more of these functions to help with the request.\\n\\n' }}
    {{- 'Function signatures are listed inside <tools></tools>:\\n<tools>' }}
    {%- for tool in tools %}
        {{- '\\n' + tool | tojson }}
    {%- endfor %}
    {{- '\\n</tools>\\n\\nFor each call, write a JSON object with the function name and its arguments '
        'inside <tool_call></tool_call> tags:\\n<tool_call>\\n{"name": <function-name>, '
        '"arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- else %}
    {{- '<|im_start|>system\\n' + default_system + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == 'system' and loop.first %}
    {%- elif message.role == 'user' or message.role == 'system' or (message.role == 'assistant' and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
    {%- elif message.role == 'assistant' %}
        {{- '<|im_start|>assistant' }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for call in message.tool_calls %}
            {%- set fn = call.function if call.function is defined else call %}
            {{- '\\n<tool_call>\\n{"name": "' + fn.name + '", "arguments": ' }}
            {{- fn.arguments if fn.arguments is string else fn.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

QWEN3_THINKING_TEMPLATE = """\
{#- Qwen3 style: ChatML with <think> blocks kept only after the last real user query -#}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages | length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == 'user' and message.content is string
          and not (message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- '# Tools\\n\\nFunction signatures, one JSON object per line:\\n<tools>' }}
    {%- for tool in tools %}
        {{- '\\n' }}{{ tool | tojson }}
    {%- endfor %}
    {{- '\\n</tools><|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- set content = message.content if message.content is string else '' %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}
    {%- elif message.role == 'assistant' %}
        {%- set reasoning = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index and (loop.last or reasoning) %}
            {{- '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
        {%- else %}
            {{- '<|im_start|>assistant\\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for call in message.tool_calls %}
                {%- if (loop.first and content) or not loop.first %}
                    {{- '\\n' }}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' + call.function.name + '", "arguments": ' }}
                {{- call.function.arguments | tojson if call.function.arguments is not string else call.function.arguments }}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""

GEMMA_TEMPLATE = """\
{#- Gemma style: no system role (folded into the first user turn), 'model' for the assistant -#}
{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- if messages[0]['content'] is string %}
        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' %}
    {%- else %}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' %}
    {%- endif %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set first_user_prefix = '' %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('Gemma needs user and model turns to alternate, starting with user.') }}
    {%- endif %}
    {%- set role = 'model' if message['role'] == 'assistant' else message['role'] %}
    {{- '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') }}
    {%- if message['content'] is string %}
        {{- message['content'] | trim }}
    {%- else %}
        {%- for item in message['content'] %}
            {%- if item['type'] == 'image' %}
                {{- '<start_of_image>' }}
            {%- elif item['type'] == 'text' %}
                {{- item['text'] | trim }}
            {%- endif %}
        {%- endfor %}
    {%- endif %}
    {{- '<end_of_turn>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<start_of_turn>model\\n' }}
{%- endif %}
"""

MISTRAL_TEMPLATE = """\
{#- Mistral v3 style: system merged into the last user turn, tools before the last user turn -#}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr('role', 'equalto', 'user') | list %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message['role'] == 'user' %}
        {%- if tools and message == user_messages[-1] %}
            {{- '[AVAILABLE_TOOLS] [' }}
            {%- for tool in tools %}
                {{- tool | tojson }}{% if not loop.last %}{{ ', ' }}{% endif %}
            {%- endfor %}
            {{- '][/AVAILABLE_TOOLS]' }}
        {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- '[INST] ' + system_message + '\\n\\n' + message['content'] + '[/INST]' }}
        {%- else %}
            {{- '[INST] ' + message['content'] + '[/INST]' }}
        {%- endif %}
    {%- elif message.tool_calls is defined %}
        {{- '[TOOL_CALLS] [' }}
        {%- for call in message.tool_calls %}
            {{- {'name': call.function.name, 'arguments': call.function.arguments, 'id': call.id} | tojson }}
            {%- if not loop.last %}
                {{- ', ' }}
            {%- endif %}
        {%- endfor %}
        {{- ']' + eos_token }}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token }}
    {%- elif message['role'] == 'tool' %}
        {{- '[TOOL_RESULTS] ' + {'content': message.content, 'call_id': message.tool_call_id} | tojson + '[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception('Only system, user, assistant and tool roles are supported.') }}
    {%- endif %}
{%- endfor %}
"""

# Text mode again: every block tag alone on its line.
PHI3_TEMPLATE = """\
{% for message in messages %}
{% if message['role'] in ['system', 'user', 'assistant'] %}
<|{{ message['role'] }}|>
{{ message['content'] }}<|end|>
{% endif %}
{% endfor %}
{% if add_generation_prompt %}
<|assistant|>
{% else %}
{{ eos_token }}
{%- endif %}
"""

DEEPSEEK_TEMPLATE = """\
{#- DeepSeek R1 style: systems first, fullwidth-bar markers, thinking dropped from history, tool calls/outputs -#}
{%- set ns = namespace(system='') %}
{%- for message in messages if message.role == 'system' %}
    {%- set ns.system = ns.system + ('\\n\\n' if ns.system else '') + message.content %}
{%- endfor %}
{{- bos_token + ns.system }}
{%- for message in messages %}
    {%- if message.role == 'user' %}
        {{- '<｜User｜>' + message.content }}
    {%- elif message.role == 'assistant' and message.tool_calls is defined %}
        {{- '<｜Assistant｜>' + (message.content or '') + '<｜tool▁calls▁begin｜>' }}
        {%- for call in message.tool_calls %}
            {{- '<｜tool▁call▁begin｜>' + call.type + '<｜tool▁sep｜>' + call.function.name }}
            {{- '\\n```json\\n' + call.function.arguments | tojson + '\\n```<｜tool▁call▁end｜>' }}
        {%- endfor %}
        {{- '<｜tool▁calls▁end｜>' + eos_token }}
    {%- elif message.role == 'assistant' %}
        {%- set content = message.content %}
        {%- if '</think>' in content %}
            {%- set content = content.split('</think>')[-1] %}
        {%- endif %}
        {{- '<｜Assistant｜>' + content + eos_token }}
    {%- elif message.role == 'tool' %}
        {%- if loop.previtem is defined and loop.previtem.role == 'tool' %}
            {{- '<｜tool▁output▁begin｜>' + message.content + '<｜tool▁output▁end｜>' }}
        {%- else %}
            {{- '<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message.content + '<｜tool▁output▁end｜>' }}
        {%- endif %}
        {%- if loop.nextitem is not defined or loop.nextitem.role != 'tool' %}
            {{- '<｜tool▁outputs▁end｜>' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<｜Assistant｜><think>\\n' }}
{%- endif %}
"""

GENERATION_TEMPLATE = """\
{#- ChatML with the assistant's own tokens marked by {% generation %} for assistant masks -#}
{%- for message in messages %}
    {%- if message.role == 'assistant' %}
        {{- '<|im_start|>assistant\\n' }}
        {%- generation %}
            {{- message.content + '<|im_end|>' }}
        {%- endgeneration %}
        {{- '\\n' }}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

# Zephyr format in text mode, with {% generation %} / {% endgeneration %} on lines of their own.
ZEPHYR_GENERATION_TEMPLATE = """\
{% for message in messages %}
<|{{ message.role }}|>
{% if message.role == 'assistant' %}
    {% generation %}
{{ message.content }}{{ eos_token }}
    {% endgeneration %}
{% else %}
{{ message.content }}{{ eos_token }}
{% endif %}
{% endfor %}
{% if add_generation_prompt %}
<|assistant|>
{% endif %}
"""

GRANITE_RAG_TEMPLATE = """\
{#- Granite 3 style roles, with retrieved documents (the `documents` argument) in a system turn -#}
{%- macro turn(role, text) -%}
<|start_of_role|>{{ role }}<|end_of_role|>{{ text }}<|end_of_text|>{{ '\\n' }}
{%- endmacro -%}
{%- if messages[0].role == 'system' %}
    {%- set system = messages[0].content %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set system = 'You are a careful assistant. Answer from the documents when they are given.' %}
    {%- set loop_messages = messages %}
{%- endif %}
{{- turn('system', system) }}
{%- if documents %}
    {%- set ns = namespace(text='') %}
    {%- for doc in documents %}
        {%- set title = doc.title | default('Document ' ~ loop.index) %}
        {%- set ns.text = ns.text ~ '[' ~ (doc.doc_id | default(loop.index0)) ~ '] ' ~ title ~ '\\n' ~ doc.text | trim ~ '\\n\\n' %}
    {%- endfor %}
    {{- turn('documents', ns.text | trim) }}
{%- endif %}
{%- for message in loop_messages %}
    {{- turn(message.role, message.content) }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_of_role|>assistant<|end_of_role|>' }}
{%- endif %}
"""

PYTOOLS_TEMPLATE = """\
{#- Tools shown as Python signatures (macros, recursion-free), ChatML turns -#}
{%- macro py_type(t) -%}
{{- {'string': 'str', 'integer': 'int', 'number': 'float', 'boolean': 'bool', 'array': 'list', 'object': 'dict'}.get(t, 'Any') -}}
{%- endmacro -%}
{%- macro signature(fn) -%}
{%- set props = fn.parameters.properties | default({}) -%}
{%- set required = fn.parameters.required | default([]) -%}
def {{ fn.name }}(
{%- for name, spec in props | items -%}
{{ name }}: {{ py_type(spec.type) }}{{ '' if name in required else ' = None' }}{{ ', ' if not loop.last }}
{%- endfor -%}
):
    \"\"\"{{ fn.description }}

{% for name, spec in props | dictsort %}
    {{ name }}: {{ spec.description | default('(no description)') }}
{%- if spec.enum is defined %} One of: {{ spec.enum | map('tojson') | join(', ') }}.{% endif %}

{% endfor %}
    \"\"\"
{%- endmacro -%}
{%- if tools %}
<|im_start|>system
You can call these Python functions:

{% for tool in tools %}
{{ signature(tool.function) }}

{% endfor %}
Call one by writing <call>name(arg=value)</call>.<|im_end|>
{% endif %}
{% for message in messages %}
<|im_start|>{{ message.role }}
{% if message.tool_calls is defined %}
{% for call in message.tool_calls %}
<call>{{ call.function.name }}(
{%- for k, v in call.function.arguments.items() -%}
{{ k }}={{ v | tojson }}{% if not loop.last %}, {% endif %}
{%- endfor -%}
)</call>
{% endfor %}
<|im_end|>
{% else %}
{{ message.content }}<|im_end|>
{% endif %}
{% endfor %}
{% if add_generation_prompt %}
<|im_start|>assistant
{% endif %}
"""

# ---------------------------------------------------------------------------------------------------------------
# Conversations
# ---------------------------------------------------------------------------------------------------------------

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City name, e.g. \"Paris\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
            },
            "required": ["location"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a time zone (IANA name).",
        "parameters": {
            "type": "object",
            "properties": {"tz": {"type": "string"}, "hour24": {"type": "boolean", "description": "24-hour clock"}},
            "required": ["tz"],
        },
    },
}
TOOLS = [WEATHER_TOOL, TIME_TOOL]

SYSTEM = "You are a concise assistant."
CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello!"}],
    "sys-multi": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3+3?"},
    ],
    "multi": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke."},
        {"role": "assistant", "content": "Why did the chicken cross the road?"},
    ],
    "unicode": [
        {"role": "system", "content": "Réponds en français. 日本語もOK。"},
        {"role": "user", "content": "Ça va? 👋🏽 «quotes» \"double\" 'single' back\\slash {{ not jinja }} {% raw %}"},
        {"role": "assistant", "content": "多谢！ 🚀\ttab\nnew line"},
        {"role": "user", "content": "  padded with spaces and newlines \n\n"},
    ],
    "empty": [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}, {"role": "user", "content": " "}],
    "tools": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "What's the weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"},
        {"role": "assistant", "content": "It is 21.5 °C and clear in Paris."},
        {"role": "user", "content": "Thanks!"},
    ],
    "tools-parallel": [
        {"role": "user", "content": "Weather in Tokyo and the time there?"},
        {
            "role": "assistant",
            "content": "Let me check both.",
            "tool_calls": [
                {"id": "a1", "type": "function", "function": {"name": "get_weather", "arguments": {"location": "東京"}}},
                {"id": "a2", "type": "function", "function": {"name": "get_time", "arguments": "{\"tz\": \"Asia/Tokyo\"}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "a1", "content": "rainy, 18"},
        {"role": "tool", "tool_call_id": "a2", "content": "09:30"},
    ],
    "tool-single": [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c9", "type": "function",
                 "function": {"name": "get_weather", "arguments": {"location": "Oslo", "unit": "fahrenheit"}}}
            ],
        },
        {"role": "tool", "tool_call_id": "c9", "content": {"temp": -3, "ok": True, "note": None}},
    ],
    "builtin-tool": [
        {"role": "user", "content": "Search the web for jinja2."},
        {
            "role": "assistant",
            "tool_calls": [{"type": "function", "function": {"name": "brave_search", "arguments": {"query": "jinja2 docs"}}}],
        },
        {"role": "ipython", "content": "Jinja is a templating engine."},
    ],
    "two-calls": [
        {"role": "user", "content": "Both please."},
        {
            "role": "assistant",
            "tool_calls": [
                {"type": "function", "function": {"name": "get_weather", "arguments": {"location": "Rome"}}},
                {"type": "function", "function": {"name": "get_time", "arguments": {"tz": "Europe/Rome"}}},
            ],
        },
    ],
    "thinking": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "First question"},
        {"role": "assistant", "content": "<think>\nold reasoning\n</think>\n\nFirst answer"},
        {"role": "user", "content": "Second question"},
        {"role": "assistant", "content": "Second answer", "reasoning_content": "\nnew reasoning\n"},
    ],
    "thinking-tools": [
        {"role": "user", "content": "Weather in Lima?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "I should call the tool.",
            "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"location": "Lima"}}}],
        },
        {"role": "tool", "content": "sunny"},
        {"role": "user", "content": "<tool_response>fake</tool_response>"},
    ],
    "parts": [
        {"role": "system", "content": [{"type": "text", "text": "System as parts."}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "  What is in this image?  "},
                                     {"type": "text", "text": "Be brief."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
    ],
    "bad-alternation": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    "starts-assistant": [{"role": "assistant", "content": "I speak first"}, {"role": "user", "content": "ok"}],
    "unknown-role": [{"role": "user", "content": "a"}, {"role": "narrator", "content": "b"}],
    "two-systems": [
        {"role": "system", "content": "Rule one."},
        {"role": "system", "content": "Rule two."},
        {"role": "user", "content": "Go"},
    ],
}

DOCUMENTS = [
    {"title": "Jinja", "text": "  Jinja is a template engine for Python.  "},
    {"text": "Templates use {{ }} and {% %}.", "doc_id": "d-7"},
]

LLAMA2_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
LLAMA3_TOKENS = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
QWEN_TOKENS = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
GEMMA_TOKENS = {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>",
                "mask_token": "<mask>"}
PHI3_TOKENS = {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>", "pad_token": "<|endoftext|>"}
DEEPSEEK_TOKENS = {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}
GRANITE_TOKENS = {"bos_token": "<|end_of_text|>", "eos_token": "<|end_of_text|>", "pad_token": "<|end_of_text|>"}

# (case name, template, conversation, options). Options: gen (add_generation_prompt), tools, documents, kwargs.
FAMILY_CASES = [
    ("llama2-user", LLAMA2_TEMPLATE, "user", dict(gen=True, tokens=LLAMA2_TOKENS)),
    ("llama2-sys-multi", LLAMA2_TEMPLATE, "sys-multi", dict(gen=True, tokens=LLAMA2_TOKENS)),
    ("llama2-multi", LLAMA2_TEMPLATE, "multi", dict(gen=False, tokens=LLAMA2_TOKENS)),
    ("llama2-unicode", LLAMA2_TEMPLATE, "unicode", dict(gen=True, tokens=LLAMA2_TOKENS)),
    ("llama2-bad-alternation", LLAMA2_TEMPLATE, "bad-alternation", dict(gen=True, tokens=LLAMA2_TOKENS)),
    ("llama3-user", LLAMA3_TEMPLATE, "user", dict(gen=True, tokens=LLAMA3_TOKENS)),
    ("llama3-sys-multi", LLAMA3_TEMPLATE, "sys-multi", dict(gen=True, tokens=LLAMA3_TOKENS)),
    ("llama3-sys-multi-nogen", LLAMA3_TEMPLATE, "sys-multi", dict(gen=False, tokens=LLAMA3_TOKENS)),
    ("llama3-unicode", LLAMA3_TEMPLATE, "unicode", dict(gen=True, tokens=LLAMA3_TOKENS)),
    ("llama3-empty", LLAMA3_TEMPLATE, "empty", dict(gen=False, tokens=LLAMA3_TOKENS)),
    ("llama31-user-no-tools", LLAMA31_TOOLS_TEMPLATE, "user", dict(gen=True, tokens=LLAMA3_TOKENS,
                                                                  kwargs={"date_string": "26 Jul 2024"})),
    ("llama31-tools", LLAMA31_TOOLS_TEMPLATE, "tools", dict(gen=True, tools=TOOLS, tokens=LLAMA3_TOKENS,
                                                           kwargs={"date_string": "01 Jan 2025"})),
    ("llama31-tool-dict-result", LLAMA31_TOOLS_TEMPLATE, "tool-single", dict(gen=True, tools=[WEATHER_TOOL],
                                                                             tokens=LLAMA3_TOKENS,
                                                                             kwargs={"date_string": "02 Feb 2025"})),
    ("llama31-builtin", LLAMA31_TOOLS_TEMPLATE, "builtin-tool",
     dict(gen=True, tokens=LLAMA3_TOKENS,
          kwargs={"date_string": "03 Mar 2025", "builtin_tools": ["brave_search", "code_interpreter", "wolfram_alpha"]})),
    ("llama31-parts-system", LLAMA31_TOOLS_TEMPLATE, "parts", dict(gen=False, tokens=LLAMA3_TOKENS,
                                                                  kwargs={"date_string": "04 Apr 2025"})),
    ("llama31-two-calls-raise", LLAMA31_TOOLS_TEMPLATE, "two-calls", dict(gen=True, tools=TOOLS, tokens=LLAMA3_TOKENS,
                                                                          kwargs={"date_string": "05 May 2025"})),
    ("chatml-user", CHATML_TOOLS_TEMPLATE, "user", dict(gen=True, tokens=QWEN_TOKENS)),
    ("chatml-sys-multi", CHATML_TOOLS_TEMPLATE, "sys-multi", dict(gen=True, tokens=QWEN_TOKENS)),
    ("chatml-sys-multi-nogen", CHATML_TOOLS_TEMPLATE, "sys-multi", dict(gen=False, tokens=QWEN_TOKENS)),
    ("chatml-unicode", CHATML_TOOLS_TEMPLATE, "unicode", dict(gen=True, tokens=QWEN_TOKENS)),
    ("chatml-tools", CHATML_TOOLS_TEMPLATE, "tools", dict(gen=True, tools=TOOLS, tokens=QWEN_TOKENS)),
    ("chatml-tools-parallel", CHATML_TOOLS_TEMPLATE, "tools-parallel", dict(gen=True, tools=TOOLS, tokens=QWEN_TOKENS)),
    ("chatml-dict-tool-content-error", CHATML_TOOLS_TEMPLATE, "tool-single", dict(gen=False, tools=[WEATHER_TOOL],
                                                                          tokens=QWEN_TOKENS)),
    ("chatml-empty", CHATML_TOOLS_TEMPLATE, "empty", dict(gen=True, tokens=QWEN_TOKENS)),
    ("qwen3-user", QWEN3_THINKING_TEMPLATE, "user", dict(gen=True, tokens=QWEN_TOKENS)),
    ("qwen3-user-no-thinking", QWEN3_THINKING_TEMPLATE, "user", dict(gen=True, tokens=QWEN_TOKENS,
                                                                     kwargs={"enable_thinking": False})),
    ("qwen3-user-thinking-true", QWEN3_THINKING_TEMPLATE, "user", dict(gen=True, tokens=QWEN_TOKENS,
                                                                       kwargs={"enable_thinking": True})),
    ("qwen3-thinking", QWEN3_THINKING_TEMPLATE, "thinking", dict(gen=False, tokens=QWEN_TOKENS)),
    ("qwen3-thinking-tools", QWEN3_THINKING_TEMPLATE, "thinking-tools", dict(gen=True, tools=TOOLS, tokens=QWEN_TOKENS)),
    ("qwen3-tools-parallel", QWEN3_THINKING_TEMPLATE, "tools-parallel", dict(gen=True, tools=TOOLS, tokens=QWEN_TOKENS)),
    ("qwen3-sys-multi", QWEN3_THINKING_TEMPLATE, "sys-multi", dict(gen=True, tokens=QWEN_TOKENS)),
    ("qwen3-two-systems", QWEN3_THINKING_TEMPLATE, "two-systems", dict(gen=True, tokens=QWEN_TOKENS)),
    ("gemma-user", GEMMA_TEMPLATE, "user", dict(gen=True, tokens=GEMMA_TOKENS)),
    ("gemma-sys-multi", GEMMA_TEMPLATE, "sys-multi", dict(gen=True, tokens=GEMMA_TOKENS)),
    ("gemma-multi-nogen", GEMMA_TEMPLATE, "multi", dict(gen=False, tokens=GEMMA_TOKENS)),
    ("gemma-unicode", GEMMA_TEMPLATE, "unicode", dict(gen=True, tokens=GEMMA_TOKENS)),
    ("gemma-parts", GEMMA_TEMPLATE, "parts", dict(gen=True, tokens=GEMMA_TOKENS)),
    ("gemma-starts-assistant", GEMMA_TEMPLATE, "starts-assistant", dict(gen=True, tokens=GEMMA_TOKENS)),
    ("mistral-user", MISTRAL_TEMPLATE, "user", dict(gen=True, tokens=LLAMA2_TOKENS)),
    ("mistral-sys-multi", MISTRAL_TEMPLATE, "sys-multi", dict(gen=True, tokens=LLAMA2_TOKENS)),
    ("mistral-multi", MISTRAL_TEMPLATE, "multi", dict(gen=False, tokens=LLAMA2_TOKENS)),
    ("mistral-unicode", MISTRAL_TEMPLATE, "unicode", dict(gen=True, tokens=LLAMA2_TOKENS)),
    ("mistral-tools", MISTRAL_TEMPLATE, "tools", dict(gen=True, tools=TOOLS, tokens=LLAMA2_TOKENS)),
    ("mistral-unknown-role", MISTRAL_TEMPLATE, "unknown-role", dict(gen=True, tokens=LLAMA2_TOKENS)),
    ("phi3-user", PHI3_TEMPLATE, "user", dict(gen=True, tokens=PHI3_TOKENS)),
    ("phi3-sys-multi", PHI3_TEMPLATE, "sys-multi", dict(gen=True, tokens=PHI3_TOKENS)),
    ("phi3-sys-multi-nogen", PHI3_TEMPLATE, "sys-multi", dict(gen=False, tokens=PHI3_TOKENS)),
    ("phi3-unicode", PHI3_TEMPLATE, "unicode", dict(gen=True, tokens=PHI3_TOKENS)),
    ("phi3-tools-dropped", PHI3_TEMPLATE, "tools", dict(gen=True, tools=TOOLS, tokens=PHI3_TOKENS)),
    ("deepseek-user", DEEPSEEK_TEMPLATE, "user", dict(gen=True, tokens=DEEPSEEK_TOKENS)),
    ("deepseek-thinking", DEEPSEEK_TEMPLATE, "thinking", dict(gen=True, tokens=DEEPSEEK_TOKENS)),
    ("deepseek-two-systems", DEEPSEEK_TEMPLATE, "two-systems", dict(gen=True, tokens=DEEPSEEK_TOKENS)),
    ("deepseek-tools", DEEPSEEK_TEMPLATE, "tools", dict(gen=True, tools=TOOLS, tokens=DEEPSEEK_TOKENS)),
    ("deepseek-tools-parallel", DEEPSEEK_TEMPLATE, "tools-parallel", dict(gen=True, tools=TOOLS,
                                                                          tokens=DEEPSEEK_TOKENS)),
    ("generation-multi", GENERATION_TEMPLATE, "multi", dict(gen=False, tokens=QWEN_TOKENS)),
    ("generation-sys-multi", GENERATION_TEMPLATE, "sys-multi", dict(gen=True, tokens=QWEN_TOKENS)),
    ("generation-unicode", GENERATION_TEMPLATE, "unicode", dict(gen=True, tokens=QWEN_TOKENS)),
    ("zephyr-generation-multi", ZEPHYR_GENERATION_TEMPLATE, "multi", dict(gen=True, tokens=LLAMA2_TOKENS)),
    ("zephyr-generation-sys-multi", ZEPHYR_GENERATION_TEMPLATE, "sys-multi", dict(gen=False, tokens=LLAMA2_TOKENS)),
    ("granite-rag-documents", GRANITE_RAG_TEMPLATE, "user", dict(gen=True, documents=DOCUMENTS, tokens=GRANITE_TOKENS)),
    ("granite-rag-sys-multi", GRANITE_RAG_TEMPLATE, "sys-multi", dict(gen=False, documents=DOCUMENTS,
                                                                      tokens=GRANITE_TOKENS)),
    ("granite-rag-no-documents", GRANITE_RAG_TEMPLATE, "multi", dict(gen=True, tokens=GRANITE_TOKENS)),
    ("pytools-tools", PYTOOLS_TEMPLATE, "tool-single", dict(gen=True, tools=TOOLS, tokens=QWEN_TOKENS)),
    ("pytools-no-tools", PYTOOLS_TEMPLATE, "sys-multi", dict(gen=True, tokens=QWEN_TOKENS)),
]

# Contexts passed as-is (not through apply_chat_template's normalization): e.g. content None stays None.
RAW_FAMILY_CASES = [
    ("chatml-raw-null-content", CHATML_TOOLS_TEMPLATE,
     {"messages": CONVERSATIONS["tools"], "tools": TOOLS, "documents": None, "add_generation_prompt": True,
      **QWEN_TOKENS}),
    ("llama3-raw-minimal-context", LLAMA3_TEMPLATE, {"messages": CONVERSATIONS["user"]}),
    ("deepseek-raw-null-content", DEEPSEEK_TEMPLATE,
     {"messages": CONVERSATIONS["tools"], "add_generation_prompt": False, **DEEPSEEK_TOKENS}),
]

# ---------------------------------------------------------------------------------------------------------------
# Feature cases: (name, template) or (name, template, context)
# ---------------------------------------------------------------------------------------------------------------

MSGS = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "yo", "extra": None},
]
PEOPLE = [{"name": "bob", "age": 30, "tags": ["a"]}, {"name": "Alice", "age": 25}, {"name": "carl", "age": 35, "tags": []}]
D = {"b": 2, "a": 1, "c": 3}
SCHEMA = {
    "type": "object",
    "properties": {
        "a": {"type": "string"},
        "b": {"type": "array", "items": {"type": "object", "properties": {"c": {"type": "integer"}}}},
    },
}

WHITESPACE = [
    ("ws-trim-blocks", "a\n{% if true %}\nb\n{% endif %}\nc"),
    ("ws-lstrip-blocks-indented-tags", "a\n    {% if true %}\n    b\n    {% endif %}\nc"),
    ("ws-lstrip-not-after-text", "a  {% if true %}b{% endif %}  c"),
    ("ws-dash-left-block", "a   \n  {%- if true %}b{% endif %}"),
    ("ws-dash-right-block", "{% if true -%}   \n\n  b{% endif %}"),
    ("ws-dash-both-loop", "{%- for i in range(3) -%}\n  {{ i }}\n{%- endfor -%}\n"),
    ("ws-var-dash", "a  \n {{- 'x' -}} \n b"),
    ("ws-var-no-trim-blocks", "{{ 'x' }}\nb"),
    ("ws-var-no-lstrip", "  {{ 'x' }}"),
    ("ws-dash-eats-all-newlines", "a\n\n\n{{- 'b' -}}\n\n\nc"),
    ("ws-comment-trim-blocks", "a\n{# comment #}\nb"),
    ("ws-comment-lstrip", "a\n   {# comment #}\nb"),
    ("ws-comment-dash", "a  {#- comment -#}  b"),
    ("ws-plus-disables-lstrip", "a\n    {%+ if true %}b{% endif %}"),
    ("ws-plus-disables-trim", "{% if true +%}\nb{% endif %}"),
    ("ws-tabs", "\t\t{% if true %}\n\tx\n\t{% endif %}\ny"),
    ("ws-crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc"),
    ("ws-lone-cr", "a\r{% if true %}\rb{% endif %}\rc"),
    ("ws-trailing-newline-dropped", "hello\n"),
    ("ws-only-one-trailing-newline-dropped", "hello\n\n"),
    ("ws-block-alone-on-line-between-text", "line1\n  {% set x = 1 %}\nline2 {{ x }}\n"),
    ("ws-two-tags-one-line", "{% if true %}{% if true %}\nx\n{% endif %}{% endif %}\ny"),
    ("ws-trim-only-first-newline", "{% if true %}\n\nx{% endif %}"),
    ("ws-lstrip-spaces-before-text-kept", "   x {% if true %}y{% endif %}"),
    ("ws-dash-strips-into-previous-line", "a\n  \n  {%- if true %}b{% endif %}"),
    ("ws-text-mode-loop", "{% for i in [1, 2] %}\n  item {{ i }}\n{% endfor %}\nend"),
    ("ws-raw-block", "{% raw %}{{ x }} {% if %}{% endraw %}"),
    ("ws-raw-trim", "a\n{% raw %}\n{{ x }}\n{% endraw %}\nb"),
    ("ws-raw-dash", "a {%- raw -%} {{ x }} {%- endraw -%} b"),
    ("ws-set-line-then-var", "{% set x = 1 %}\n{{ x }}"),
    ("ws-multiline-comment", "{# multi\nline {{ x }} {% if %} #}ok"),
    ("ws-nested-indent", "{% for i in [1] %}\n    {% if i %}\n        v{{ i }}\n    {% endif %}\n{% endfor %}"),
]

LITERALS = [
    ("lit-strings", "{{ 'single' }}|{{ \"double\" }}|{{ 'it\"s' }}|{{ \"it's\" }}"),
    ("lit-escapes", "{{ 'a\\nb\\tc\\\\d' }}|{{ 'q\\'q' }}|{{ \"q\\\"q\" }}"),
    ("lit-octal-and-c-escapes", r"{{ '\101\0\a\b\f\v\r' | tojson }}"),
    ("lit-unicode-escapes", r"{{ '\u00e9' }}|{{ '\x41' }}|{{ '\U0001F600' }}|{{ '\N{BULLET}' }}"),
    ("lit-unknown-escape-kept", r"{{ '\q\d' }}"),
    ("lit-line-continuation", "{{ 'a\\\nb' }}"),
    ("lit-literal-newline-in-string", "{{ 'a\nb' }}"),
    ("lit-adjacent-concat", "{{ 'a' \"b\" 'c' }}"),
    ("lit-ints", "{{ 42 }} {{ -3 }} {{ 1_000_000 }} {{ 0x1F }} {{ 0b101 }} {{ 0o17 }}"),
    ("lit-floats", "{{ 1.5 }} {{ 1e3 }} {{ 1.5e-3 }} {{ 2E2 }} {{ 1_0.5 }} {{ 10.0 }}"),
    ("lit-float-leading-dot", "{{ .5 }}"),
    ("lit-float-trailing-dot", "{{ 1. }}"),
    ("lit-bools-none", "{{ true }} {{ True }} {{ false }} {{ False }} {{ none }} {{ None }}"),
    ("lit-list-dict-tuple", "{{ [1, 'a', [2]] }} {{ {'k': 'v', 'n': [1, {'x': none}]} }} {{ (1, 2) }} {{ (1,) }} {{ () }}"),
    ("lit-trailing-commas", "{{ [1, 2,] }} {{ {'a': 1,} }} {{ (1, 2,) }}"),
    ("lit-dict-int-keys", "{{ {1: 'a', 2: 'b'}[2] }} {{ {1: 'a'} }}"),
    ("lit-dict-duplicate-key", "{{ {'a': 1, 'a': 2} }}"),
]

ARITHMETIC = [
    ("arith-int", "{{ 7 + 3 }} {{ 7 - 10 }} {{ 6 * 7 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ 7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }}"),
    ("arith-negative-floor", "{{ -7 // 2 }} {{ 7 // -2 }} {{ -7 % 2 }} {{ 7 % -2 }} {{ -7 / 2 }}"),
    ("arith-float", "{{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 1 + 2.0 }} {{ 0.1 + 0.2 }} {{ 2 ** -1 }} {{ 2 ** 0.5 }} {{ 10 / 4 }}"),
    ("arith-unary-minus-pow", "{{ -2 ** 2 }} {{ (-2) ** 2 }} {{ -(2 ** 2) }}"),
    ("arith-pow-left-assoc", "{{ 2 ** 3 ** 2 }}"),
    ("arith-precedence", "{{ 2 + 3 * 4 }} {{ (2 + 3) * 4 }} {{ 10 - 2 - 3 }} {{ 2 * 3 % 4 }} {{ 17 // 5 * 5 }}"),
    ("arith-unary-minus-binds-tighter-than-filter", "{{ -1 | abs }} {{ (-1) | abs }}"),
    ("arith-tilde-precedence", "{{ 'a' ~ 2 * 3 }} {{ (1 + 2) ~ 3 }} {{ 1 ~ 2 ~ 3 }}"),
    ("arith-tilde-binds-tighter-than-plus", "{{ 1 + 2 ~ 3 }}"),
    ("arith-string-concat", "{{ 'ab' + 'cd' }} {{ 'ab' * 3 }} {{ 3 * 'ab' }} {{ [1] * 3 }} {{ [1, 2] + [3] }}"),
    ("arith-tilde", "{{ 'a' ~ 1 ~ 1.5 ~ none ~ true ~ [1] ~ undefined_var ~ 'z' }}"),
    ("arith-bool-is-int", "{{ true + 1 }} {{ true * 3 }} {{ false - 1 }}"),
    ("arith-big-int", "{{ 2 ** 64 }} {{ 10 ** 20 // 3 }} {{ -(2 ** 70) }}"),
    ("arith-inf-nan", "{{ 1e308 * 10 }} {{ -1e308 * 10 }} {{ (1e308 * 10) - (1e308 * 10) }}"),
    ("arith-int-plus-str", "{{ 1 + 'a' }}"),
    ("arith-str-plus-int", "{{ 'a' + 1 }}"),
    ("arith-none-plus-int", "{{ none + 1 }}"),
    ("arith-undefined-plus-int", "{{ nope + 1 }}"),
    ("arith-str-times-str", "{{ 'a' * 'b' }}"),
    ("arith-unary-minus-str", "{{ -'a' }}"),
    ("arith-div-zero", "{{ 1 / 0 }}"),
    ("arith-floordiv-zero", "{{ 1 // 0 }}"),
    ("arith-mod-zero", "{{ 1 % 0 }}"),
    ("arith-float-div-zero", "{{ 1.0 / 0 }}"),
    ("arith-str-mod-format", "{{ '%s=%d|%5.2f|%-4s|' % ('a', 1, 3.14159, 'x') }}{{ '%s!' % 'one' }}"),
]

COMPARISONS = [
    ("cmp-chain", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 1 }} {{ 1 < 3 > 2 }} {{ 1 < 2 > 3 }} {{ 1 == 1 == 1 }}"),
    ("cmp-mixed-numbers", "{{ 1 == 1.0 }} {{ true == 1 }} {{ 0 == false }} {{ 1 != 2 }} {{ 2 >= 2 }} {{ 2 <= 1 }}"),
    ("cmp-strings-lists",
     "{{ 'a' < 'b' }} {{ 'B' < 'a' }} {{ [1, 2] == [1, 2] }} {{ [1, 2] < [1, 3] }} "
     "{{ {'a': 1} == {'a': 1} }}"),
    ("cmp-none", "{{ none == none }} {{ none == false }} {{ none != 0 }} {{ x == none }}"),
    ("cmp-int-str-eq", "{{ 1 == '1' }}"),
    ("cmp-int-str-lt", "{{ 1 < 'a' }}"),
    ("in-string", "{{ 'ell' in 'hello' }} {{ 'z' in 'hello' }} {{ '' in 'x' }} {{ 'z' not in 'abc' }}"),
    ("in-list", "{{ 1 in [1, 2] }} {{ 3 not in [1, 2] }} {{ 'a' in ['a'] }} {{ none in [none] }}"),
    ("in-dict", "{{ 'k' in {'k': 1} }} {{ 1 in {'k': 1} }} {{ 'role' in m }} {{ 'x' not in m }}", {"m": {"role": "user"}}),
    ("in-int-in-str", "{{ 1 in 'a1' }}"),
    ("in-undefined", "{{ 'a' in nope }}"),
]

LOGIC = [
    ("logic-and-or-return-operands",
     "{{ 1 and 2 }} {{ 0 and 2 }} {{ 0 or 'x' }} {{ '' or none }} {{ 'a' or 'b' }} {{ [] or 'empty' }}"),
    ("logic-not", "{{ not 0 }} {{ not none }} {{ not 'a' }} {{ not [] }} {{ not not 1 }}"),
    ("logic-none-and", "{{ none and 1 }}|{{ false or 0 }}"),
    ("logic-undefined", "{{ x or 'dflt' }}|{{ x and 1 }}|{{ not x }}|{% if x %}yes{% else %}no{% endif %}"),
    ("logic-precedence", "{{ true or false and false }} {{ not true or true }} {{ not (true or true) }} {{ not 1 == 2 }}"),
    ("logic-truthiness",
     "{% for v in [0, 1, '', 'a', [], [0], {}, {'a': 1}, none, 0.0, -1] %}{{ 'T' if v else 'F' }}"
     "{% endfor %}"),
    ("cond-expr", "{{ 'a' if true else 'b' }} {{ 'a' if false else 'b' }} {{ 'a' if 0 }}| {{ 'x' ~ ('a' if false) ~ 'y' }}"),
    ("cond-expr-no-else-is-undefined", "{{ ('a' if false) is defined }} {{ ('a' if false) is none }}"),
    ("cond-expr-nested", "{% for n in [1, 2, 3] %}{{ 'one' if n == 1 else 'two' if n == 2 else 'many' }} {% endfor %}"),
]

PRINTING = [
    ("print-scalars", "{{ none }}|{{ true }}|{{ false }}|{{ 0 }}|{{ -5 }}|{{ '' }}|{{ 'str' }}"),
    ("print-floats",
     "{{ 1.0 }} {{ 0.1 }} {{ 1e-05 }} {{ 0.0001 }} {{ 1e16 }} {{ 1e15 }} {{ 123456789.0 }} {{ -0.0 }} "
     "{{ 1/3 }} {{ 2/3 }} {{ 1e22 }} {{ 1.5e300 }} {{ 100.0 / 3 }}"),
    ("print-floats-from-context",
     "{{ a }} {{ b }} {{ c }} {{ d }} {{ e }}",
     {"a": 1.0, "b": 0.5, "c": 1e-7, "d": 3.14, "e": 12345678901234567890.0}),
    ("print-ints-from-context", "{{ a }} {{ b }} {{ a + b }}", {"a": 9007199254740993, "b": -1}),
    ("print-list", "{{ [1, 2.5, 'a', none, true, false, [], {}] }}"),
    ("print-dict", "{{ {'a': none, 'b': true, 'c': 1.0, 'd': 'x'} }}"),
    ("print-nested-context", "{{ m }}", {"m": {"role": "user", "content": [{"type": "text", "text": "hi"}], "n": None}}),
    ("print-string-repr-in-list",
     "{{ ['it\\'s', 'say \"hi\"', 'both \\' \"', 'back\\\\slash', 'new\\nline', 'tab\\t', 'é', '日本', '👋'] "
     "}}"),
    ("print-control-chars-repr", "{{ ['\\x00', '\\x1b', '\\x7f', '\\u200b', '\\u2028'] }}"),
    ("print-tuple-dict-items", "{{ d.items() | list }} {{ (1, 'a') }}", {"d": {"a": 1, "b": [2]}}),
    ("print-undefined-empty", "[{{ nope }}]"),
    ("print-undefined-in-list", "{{ [nope, 1] }}"),
    ("print-range-object", "{{ range(3) }} {{ range(1, 5, 2) }}"),
    ("print-namespace", "{% set ns = namespace(a=1, b='x') %}{{ ns }}"),
    ("print-macro-call-result", "{% macro m() %}x{% endmacro %}[{{ m() }}]"),
    ("print-unicode-passthrough", "{{ s }}", {"s": "é 日本語 👋🏽 \u200b \U0001F600 \t \\ \" '"}),
]

LOOKUPS = [
    ("lookup-attr-vs-item",
     "{{ m.role }} {{ m['role'] }} {{ m.get('role') }} {{ m.get('x', 'dflt') }} [{{ m.get('x') }}]",
     {"m": MSGS[1]}),
    ("lookup-missing-key-undefined", "[{{ m.missing }}][{{ m['missing'] }}] {{ m.missing is defined }}", {"m": MSGS[1]}),
    ("lookup-null-value-defined", "[{{ m.extra }}] {{ m.extra is defined }} {{ m.extra is none }}", {"m": MSGS[2]}),
    ("lookup-missing-then-attr", "{{ m.missing.deeper }}", {"m": MSGS[1]}),
    ("lookup-undefined-var-attr", "{{ foo.bar.baz }}"),
    ("lookup-undefined-var-item", "{{ foo[0] }}"),
    ("lookup-none-attr", "[{{ x.y }}] [{{ x['y'] }}]", {"x": None}),
    ("lookup-none-attr-attr", "{{ x.y.z }}", {"x": None}),
    ("lookup-items-keys-values", "{{ d.items() | list }} {{ d.keys() | list }} {{ d.values() | list }}", {"d": D}),
    ("lookup-method-shadows-key",
     "{{ d.items is callable }} {{ d['items'] }} {{ d.get('items') }}",
     {"d": {"items": [1, 2]}}),
    ("lookup-key-named-like-method-attr", "{% for x in d['keys'] %}{{ x }}{% endfor %}", {"d": {"keys": ["k1", "k2"]}}),
    ("lookup-underscore-key-item", "{{ m._hidden }} {{ m['_hidden'] }}", {"m": {"_hidden": "h"}}),
    ("lookup-list-index", "{{ l[0] }} {{ l[-1] }} {{ l[-3] }} [{{ l[3] }}] [{{ l[-4] }}]", {"l": ["a", "b", "c"]}),
    ("lookup-list-out-of-range-attr", "{{ l[5].role }}", {"l": []}),
    ("lookup-list-attr-index", "{{ l.0 }} {{ l.1 }}", {"l": ["a", "b"]}),
    ("lookup-index0-minus-one-wraps",
     "{% for m in messages %}{{ messages[loop.index0 - 1].role }} {% endfor %}",
     {"messages": MSGS}),
    ("lookup-nested",
     "{{ messages[0]['content'][0]['text'] }} {{ messages[0].content[0].text }}",
     {"messages": [{"content": [{"text": "deep"}]}]}),
    ("lookup-dynamic-key", "{% set k = 'role' %}{{ m[k] }} {{ m[k ~ ''] }}", {"m": MSGS[1]}),
    ("lookup-string-index-codepoints", "{{ s[0] }} {{ s[1] }} {{ s[-1] }} {{ s | length }} [{{ s[10] }}]", {"s": "héllo👋"}),
    ("lookup-cjk-index", "{{ s[0] }}{{ s[-1] }} {{ s | length }}", {"s": "日本語"}),
    ("lookup-emoji-modifier-length", "{{ s | length }} {{ s[0] }}|{{ s[::-1] }}", {"s": "👋🏽"}),
    ("lookup-tuple-item", "{% set t = ('a', 'b') %}{{ t[1] }} {{ t[-1] }} {{ t | length }}"),
    ("lookup-int-attr-undefined", "[{{ (5).foo }}]"),
    ("lookup-empty-messages-first-role", "{{ messages[0]['role'] == 'system' }}", {"messages": []}),
    ("lookup-json-string-keys", "{{ d['1'] }} [{{ d[1] }}]", {"d": {"1": "one"}}),
    ("undefined-filters",
     "[{{ nope | trim }}][{{ nope | upper }}][{{ nope | string }}][{{ nope | list }}]["
     "{{ nope | default('') }}][{{ nope | join(',') }}]"),
    ("undefined-comparisons",
     "{{ nope == nope }} {{ nope != 1 }} {{ nope is none }} {{ nope is string }} {{ nope is iterable }} "
     "{{ nope is mapping }}"),
    ("undefined-int-filter", "{{ nope | int }} {{ nope | float }}"),
    ("undefined-concat-plus", "{{ 'a' + nope }}"),
    ("undefined-in-if-elif", "{% if nope %}a{% elif nope.x is defined %}b{% else %}c{% endif %}"),
    ("set-none-is-defined", "{% set x = none %}{{ x is defined }} {{ x is none }}"),
]

SLICES = [
    ("slice-list", "{{ l[1:] }} {{ l[:2] }} {{ l[1:3] }} {{ l[-2:] }} {{ l[:-1] }} {{ l[:] }}", {"l": [0, 1, 2, 3, 4]}),
    ("slice-list-steps",
     "{{ l[::2] }} {{ l[1::2] }} {{ l[::-1] }} {{ l[::-2] }} {{ l[3:0:-1] }} {{ l[-1:-4:-1] }}",
     {"l": [0, 1, 2, 3, 4]}),
    ("slice-out-of-range", "{{ l[5:] }} {{ l[10:20] }} {{ l[-10:2] }} {{ l[3:1] }}", {"l": [0, 1, 2, 3, 4]}),
    ("slice-string", "{{ s[1:3] }} {{ s[::-1] }} {{ s[::2] }} {{ s[-3:] }} {{ s[:0] }}|", {"s": "héllo wörld"}),
    ("slice-messages-skip-system", "{% for m in messages[1:] %}{{ m.role }};{% endfor %}", {"messages": MSGS}),
    ("slice-reverse-loop", "{% for m in messages[::-1] %}{{ loop.index0 }}={{ m.role }} {% endfor %}", {"messages": MSGS}),
    ("slice-step-zero", "{{ [1, 2][::0] }}"),
    ("slice-with-expressions", "{% set n = 2 %}{{ l[n - 1:n + 1] }} {{ l[:l | length - 1] }}", {"l": [0, 1, 2, 3]}),
]

STRING_METHODS = [
    ("str-strip", "[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}]", {"s": " \t x y \n "}),
    ("str-strip-chars", "[{{ s.strip('x') }}][{{ s.lstrip('xa') }}][{{ s.rstrip('x\\n') }}]", {"s": "xxaxbxx\n"}),
    ("str-split",
     "{{ s.split() }} {{ s.split(' ') }} {{ s.split(',') }} {{ s.split(' ', 1) }} "
     "{{ s.split(maxsplit=1) }}",
     {"s": " a  b,c d "}),
    ("str-rsplit-splitlines", "{{ s.rsplit('/', 1) }} {{ t.splitlines() }}", {"s": "a/b/c", "t": "l1\nl2\r\nl3\n"}),
    ("str-split-think",
     "[{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}]["
     "{{ c.split('</think>')[-1].lstrip('\\n') }}]",
     {"c": "<think>\n\nreason here\n\n</think>\n\nanswer"}),
    ("str-startswith-endswith",
     "{{ s.startswith('ab') }} {{ s.startswith('b') }} {{ s.endswith('yz') }} "
     "{{ s.startswith(('x', 'a')) }} {{ s.endswith(('q', 'r')) }}",
     {"s": "abcxyz"}),
    ("str-case",
     "{{ s.upper() }}|{{ s.lower() }}|{{ s.title() }}|{{ s.capitalize() }}|{{ s.swapcase() }}",
     {"s": "hEllo wORLD éÉ"}),
    ("str-case-special-unicode",
     "{{ s.upper() }}|{{ s.lower() }}|{{ s.casefold() }}|{{ s.title() }}",
     {"s": "straße ǆ İ ﬁ"}),
    ("str-title-vs-title-filter",
     "{{ s.title() }}|{{ s | title }}|{{ s.capitalize() }}|{{ s | capitalize }}",
     {"s": "they're o'neil x-ray 3rd (paren) [b]"}),
    ("str-replace", "{{ s.replace('a', 'o') }} {{ s.replace('a', '', 1) }} {{ s.replace('', '-') }}", {"s": "banana"}),
    ("str-find-count-index",
     "{{ s.find('n') }} {{ s.find('z') }} {{ s.rfind('n') }} {{ s.count('a') }} {{ s.index('n') }}",
     {"s": "banana"}),
    ("str-index-missing", "{{ 'abc'.index('z') }}"),
    ("str-join",
     "{{ '-'.join(['a', 'b', 'c']) }} {{ ''.join(l) }} {{ ', '.join(d) }}",
     {"l": ["x", "y"], "d": {"k1": 1, "k2": 2}}),
    ("str-join-non-str", "{{ '-'.join([1, 2]) }}"),
    ("str-predicates",
     "{{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ ' \\n'.isspace() }} {{ 'Ab'.isupper() }} "
     "{{ 'ab'.islower() }} {{ 'a1'.isalnum() }}"),
    ("str-format-method",
     "{{ '{}-{}'.format(1, 'x') }} {{ '{a}/{b}'.format(a=1, b=2) }} "
     "{{ '{0:>5}|{1:.2f}'.format('r', 2.0) }}"),
    ("str-format-unsafe-attr", "[{{ '{0.__class__}'.format(1) }}]"),
    ("str-padding", "[{{ 'ab'.center(6, '*') }}][{{ 'ab'.ljust(4) }}][{{ 'ab'.rjust(4, '0') }}][{{ '7'.zfill(3) }}]"),
    ("str-partition-prefix",
     "{{ 'k=v=w'.partition('=') }} {{ 'prefix_x'.removeprefix('prefix_') }} "
     "{{ 'x.jinja'.removesuffix('.jinja') }}"),
    ("str-method-on-int-undefined", "[{{ (5).upper }}]"),
    ("str-method-call-on-undefined", "{{ nope.strip() }}"),
    ("str-method-unknown", "{{ 'abc'.nosuchmethod() }}"),
    ("list-nonmutating-methods",
     "{{ l.index(2) }} {{ l.count(1) }} {{ l.copy() }} {{ d.copy() }} {{ d.get('a') }}",
     {"l": [1, 2, 1], "d": {"a": 1}}),
]

FILTERS = [
    ("f-tojson-default", "{{ x | tojson }}", {"x": {"a": [1, 2.5, None, True, False], "s": "q\"b\\n\nt\t/"}}),
    ("f-tojson-indent", "{{ x | tojson(indent=2) }}", {"x": {"a": [1, {"b": []}, {}], "c": "x"}}),
    ("f-tojson-indent4-tool", "{{ tool | tojson(indent=4) }}", {"tool": WEATHER_TOOL}),
    ("f-tojson-non-ascii", "{{ ['é', '日本', '👋', '\\u2028', '<a href=\"x\">&\\'</a>'] | tojson }}"),
    ("f-tojson-ensure-ascii", "{{ ['é', '日本', '👋'] | tojson(ensure_ascii=true) }}"),
    ("f-tojson-control-chars", "{{ '\\x00\\x01\\x1f\\x7f\\b\\f\\r' | tojson }}"),
    ("f-tojson-scalars",
     "{{ 1 | tojson }} {{ 1.0 | tojson }} {{ 0.1 | tojson }} {{ 1e20 | tojson }} {{ 1e-7 | tojson }} "
     "{{ -0.0 | tojson }} {{ true | tojson }} {{ none | tojson }} {{ 'x' | tojson }} "
     "{{ (2 ** 70) | tojson }}"),
    ("f-tojson-filter-binds-before-pow", "{{ 2 ** 70 | tojson }}"),
    ("f-tojson-inf-nan", "{{ [1e308 * 10, -1e308 * 10, (1e308 * 10) - (1e308 * 10)] | tojson }}"),
    ("f-tojson-tuple-and-int-keys", "{{ (1, 'a') | tojson }} {{ {1: 'a', none: 'n', true: 't', 2.5: 'f'} | tojson }}"),
    ("f-tojson-sort-keys-separators",
     "{{ d | tojson(sort_keys=true) }} {{ d | tojson(separators=(',', ':')) }} "
     "{{ d | tojson(indent=1, separators=(',', ': ')) }}",
     {"d": D}),
    ("f-tojson-indent-string", "{{ {'a': [1]} | tojson(indent='\\t') }}"),
    ("f-tojson-undefined", "{{ nope | tojson }}"),
    ("f-tojson-namespace", "{% set ns = namespace(a=1) %}{{ ns | tojson }}"),
    ("f-trim", "[{{ '  a b \\n' | trim }}][{{ 'xxaxx' | trim('x') }}][{{ '\\u3000a\\u3000' | trim }}]"),
    ("f-length-count",
     "{{ 'héllo' | length }} {{ [1, 2] | length }} {{ {'a': 1} | length }} {{ 'abc' | count }} "
     "{{ nope | length }} {{ '' | length }}"),
    ("f-length-int", "{{ 5 | length }}"),
    ("f-case",
     "{{ 'hello wORLD' | upper }} {{ 'ABC' | lower }} {{ 'hello wORLD' | title }} "
     "{{ 'hello wORLD' | capitalize }} {{ none | lower }} {{ 12 | upper }}"),
    ("f-items",
     "{% for k, v in d | items %}{{ k }}={{ v }};{% endfor %} {{ d | items | list }} "
     "{{ nope | items | list }}",
     {"d": D}),
    ("f-items-on-list", "{{ [1, 2] | items | list }}"),
    ("f-list", "{{ 'abc' | list }} {{ d | list }} {{ (1, 2) | list }} {{ range(3) | list }}", {"d": D}),
    ("f-join",
     "{{ ['a', 'b'] | join }} {{ ['a', 'b'] | join(', ') }} {{ [1, 2] | join('-') }} "
     "{{ people | join(', ', attribute='name') }} {{ 'abc' | join('.') }}",
     {"people": PEOPLE}),
    ("f-first-last",
     "{{ [1, 2, 3] | first }} {{ [1, 2, 3] | last }} {{ 'abc' | first }} {{ 'abc' | last }} [{{ [] "
     "| first }}] {{ d | first }}",
     {"d": D}),
    ("f-default",
     "{{ nope | default('d') }} {{ '' | default('d') }} {{ '' | default('d', true) }} "
     "{{ none | default('d') }} {{ none | default('d', true) }} {{ 0 | d('z', true) }} "
     "{{ false | d('z') }}"),
    ("f-default-chain-attr", "{{ m.content | default(m.text) | default('none given') }}", {"m": {"text": "from text"}}),
    ("f-replace", "{{ 'aaa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ 'a.b' | replace('.', '') }}"),
    ("f-string-int-float",
     "{{ [1, 'a'] | string }} {{ none | string }} {{ '42' | int + 1 }} {{ '4.7' | int }} "
     "{{ 'abc' | int }} {{ 'abc' | int(7) }} {{ '0x1A' | int(0, 16) }} {{ 3.9 | int }} "
     "{{ '1.5' | float }} {{ 'x' | float }} {{ 2 | float }}"),
    ("f-safe-escape", "{{ '<b>&' | safe }} {{ '<b>&\"\\'' | e }} {{ '<x>' | escape | length }}"),
    ("f-abs-round",
     "{{ -3 | abs }} {{ -2.5 | abs }} {{ 2.5 | round }} {{ 3.5 | round }} {{ -2.5 | round }} "
     "{{ 3 | round }} {{ 2.567 | round(2) }} {{ 2.1 | round(0, 'ceil') }} {{ 2.9 | round(0, 'floor') }} "
     "{{ 1234.5678 | round(-2) }}"),
    ("f-reverse", "{{ [1, 2, 3] | reverse | list }} {{ 'abc' | reverse }} {{ 'héllo👋' | reverse }}"),
    ("f-sort",
     "{{ [3, 1, 2] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ ['B', 'a', 'C'] | sort }} "
     "{{ ['B', 'a', 'C'] | sort(case_sensitive=true) }}"),
    ("f-sort-attribute",
     "{{ people | sort(attribute='age') | map(attribute='name') | list }} "
     "{{ people | sort(attribute='name') | map(attribute='name') | join(',') }}",
     {"people": PEOPLE}),
    ("f-sort-mixed-types", "{{ [1, 'a'] | sort }}"),
    ("f-unique",
     "{{ ['a', 'A', 'b', 'a'] | unique | list }} {{ ['a', 'A'] | unique(case_sensitive=true) | list }} "
     "{{ [3, 1, 3] | unique | list }}"),
    ("f-selectattr-rejectattr",
     "{{ messages | selectattr('role', 'equalto', 'user') | list | length }} "
     "{{ messages | rejectattr('role', '==', 'system') | map(attribute='role') | join(',') }} "
     "{{ messages | selectattr('extra', 'defined') | map(attribute='role') | list }} "
     "{{ messages | selectattr('extra', 'none') | list | length }}",
     {"messages": MSGS}),
    ("f-selectattr-truthy-in",
     "{{ people | selectattr('tags') | map(attribute='name') | list }} "
     "{{ people | selectattr('name', 'in', ['bob', 'carl']) | map(attribute='name') | list }}",
     {"people": PEOPLE}),
    ("f-select-reject",
     "{{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, none, 0, 'a'] | reject('none') | list }} "
     "{{ [0, 1, '', 'x'] | select | list }} {{ [1, 5, 9] | select('gt', 4) | list }}"),
    ("f-map",
     "{{ people | map(attribute='name') | list }} {{ ['a', 'b'] | map('upper') | list }} "
     "{{ people | map(attribute='tags', default=['-']) | list }} {{ ['1', '2'] | map('int') | sum }} "
     "{{ [{'a': 1}] | map('tojson') | list }}",
     {"people": PEOPLE}),
    ("f-map-filter-args",
     "{{ ['aa', 'ba'] | map('replace', 'a', 'x') | list }} {{ [' a ', 'b '] | map('trim') | join('|') }}"),
    ("f-length-of-select-generator", "{{ [1, 2, 3] | select('odd') | length }}"),
    ("f-last-of-select-generator", "{{ [1, 2, 3] | select('odd') | last }}"),
    ("f-first-of-select-generator", "{{ [1, 2, 3] | select('even') | first }} [{{ [1] | select('even') | first }}]"),
    ("f-length-of-none", "{{ tools | length > 0 }}", {"tools": None}),
    ("f-list-last-of-selectattr",
     "{{ (messages | selectattr('role', 'equalto', 'user') | list | last).content }}",
     {"messages": MSGS + [{"role": "user", "content": "last user"}]}),
    ("f-map-nested-attribute",
     "{{ messages | map(attribute='function.name') | list }}",
     {"messages": [{"function": {"name": "f1"}}, {"function": {"name": "f2"}}]}),
    ("f-indent",
     "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|"
     "{{ 'a\\n\\nb' | indent(2, blank=true) }}|{{ 'x\\ny' | indent('> ') }}"),
    ("f-dictsort",
     "{{ d | dictsort }} {{ d | dictsort(by='value') }} {{ d | dictsort(reverse=true) }} "
     "{{ {'B': 1, 'a': 2} | dictsort }}",
     {"d": D}),
    ("f-min-max-sum",
     "{{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ ['b', 'A', 'c'] | min }} "
     "{{ people | max(attribute='age') }} {{ [1, 2, 3] | sum }} {{ people | sum(attribute='age') }} "
     "{{ [1, 2] | sum(start=10) }} {{ [0.1, 0.2] | sum }} [{{ [] | max }}]",
     {"people": PEOPLE}),
    ("f-wordcount-center-truncate",
     "{{ 'one two  three' | wordcount }}|{{ 'ab' | center(6) }}|"
     "{{ 'abcdefghijklmnopqrstuvwxyz' | truncate(10) }}|{{ 'hello world foo bar' | truncate(12) }}|"
     "{{ 'hello world foo bar' | truncate(16) }}|{{ 'hello world' | truncate(8, true, '…', 0) }}"),
    ("f-batch-slice",
     "{{ [1, 2, 3, 4, 5] | batch(2) | list }} {{ [1, 2, 3] | batch(2, 'x') | list }} {{ [1, 2, 3, 4, 5] "
     "| slice(2) | list }}"),
    ("f-groupby",
     "{% for g in messages | groupby('role') %}{{ g.grouper }}:{{ g.list | length }} {% endfor %}",
     {"messages": MSGS + [{"role": "user", "content": "again"}]}),
    ("f-format", "{{ '%s-%s' | format(1, 'a') }} {{ '%(x)s!' | format(x=2) }}"),
    ("f-wordwrap", "{{ 'the quick brown fox jumps' | wordwrap(10) }}"),
    ("f-attr", "{{ m | attr('role') }} [{{ m | attr('nope') }}]", {"m": MSGS[1]}),
    ("f-striptags-title", "{{ '<b>bold</b>  text' | striptags }}"),
    ("f-chain", "{{ '  Hello World  ' | trim | lower | replace('world', 'jinja') | upper }}"),
    ("f-filter-precedence-over-plus", "{{ 'a' + ' b ' | trim + 'c' }} {{ ('a' + ' b ') | trim }}"),
    ("f-filter-on-literal-list-then-index", "{{ ([3, 1, 2] | sort)[0] }} {{ (messages | last).role }}", {"messages": MSGS}),
    ("f-pprint", "{{ {'b': [1], 'a': 'x'} | pprint }}"),
    ("f-unknown", "{{ 1 | nosuchfilter }}"),
    ("f-unknown-in-unused-branch", "{% if false %}{{ 1 | nosuchfilter }}{% endif %}ok"),
    ("f-unknown-in-taken-branch", "{% if true %}{{ 1 | nosuchfilter }}{% endif %}ok"),
    ("f-unknown-in-uncalled-macro", "{% macro m() %}{{ 1 | nosuchfilter }}{% endmacro %}ok"),
    ("f-unknown-in-empty-loop", "{% for x in [] %}{{ 1 | nosuchfilter }}{% endfor %}ok"),
]

TESTS = [
    ("t-defined",
     "{{ x is defined }} {{ nope is defined }} {{ nope is undefined }} {{ x is not defined }} "
     "{{ m.k is defined }} {{ m.z is defined }}",
     {"x": 0, "m": {"k": None}}),
    ("t-none", "{{ none is none }} {{ x is none }} {{ nope is none }} {{ 0 is none }} {{ x is not none }}", {"x": None}),
    ("t-string-number",
     "{{ 'a' is string }} {{ 1 is string }} {{ 1 is number }} {{ 1.5 is number }} {{ true is number }} "
     "{{ '1' is number }} {{ nope is string }}"),
    ("t-integer-float-boolean",
     "{{ 1 is integer }} {{ 1.0 is integer }} {{ true is integer }} {{ 1.0 is float }} {{ 1 is float }} "
     "{{ true is boolean }} {{ 1 is boolean }} {{ none is boolean }}"),
    ("t-true-false", "{{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ none is false }}"),
    ("t-mapping-iterable-sequence",
     "{{ {} is mapping }} {{ [] is mapping }} {{ m is mapping }} {{ [] is iterable }} "
     "{{ 'a' is iterable }} {{ {} is iterable }} {{ 1 is iterable }} {{ 'a' is sequence }} "
     "{{ {} is sequence }} {{ (1,) is sequence }} {{ nope is iterable }}",
     {"m": {"a": 1}}),
    ("t-content-string-or-parts",
     "{% for c in cs %}{% if c is string %}S{% elif c is iterable and c is not mapping %}"
     "L{% elif c is mapping %}M{% else %}?{% endif %}{% endfor %}",
     {"cs": ["x", [1], {"a": 1}, 3, None, ""]}),
    ("t-odd-even-divisibleby",
     "{{ 3 is odd }} {{ 3 is even }} {{ 0 is even }} {{ -3 is odd }} {{ 9 is divisibleby 3 }} "
     "{{ 9 is divisibleby(4) }}"),
    ("t-equalto-sameas",
     "{{ 1 is equalto 1 }} {{ 'a' is eq 'b' }} {{ none is sameas none }} {{ false is sameas false }} "
     "{{ 1 is sameas true }} {{ [1] is sameas [1] }}"),
    ("t-comparison-tests",
     "{{ 1 is lt 2 }} {{ 2 is gt 2 }} {{ 2 is ge 2 }} {{ 1 is le 0 }} {{ 1 is ne 2 }} {{ 1 is eq 1 }} "
     "{{ 1 is equalto(1) }} {{ 3 is greaterthan 2 }} {{ 3 is lessthan 2 }}"),
    ("t-in", "{{ 1 is in [1, 2] }} {{ 'a' is in 'cat' }} {{ 'k' is in {'k': 1} }} {{ 3 is not in [1] }}"),
    ("t-lower-upper", "{{ 'abc' is lower }} {{ 'aBc' is lower }} {{ 'ABC' is upper }} {{ '1' is upper }}"),
    ("t-callable-filter-test",
     "{{ 'x'.upper is callable }} {{ 'x' is callable }} {{ raise_exception is callable }} "
     "{{ 'upper' is filter }} {{ 'tojson' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }}"),
    ("t-not-precedence", "{{ not nope is defined }} {{ not 1 is odd }} {{ (not 1) is odd }}"),
    ("t-is-not-with-arg", "{{ 9 is not divisibleby 3 }} {{ 1 is not equalto 2 }} {{ 'a' is not string }}"),
    ("t-escaped", "{{ 'x' is escaped }} {{ ('x' | e) is escaped }}"),
    ("t-unknown", "{{ 1 is nosuchtest }}"),
    ("t-unknown-in-unused-branch", "{% if false %}{{ 1 is nosuchtest }}{% elif true %}ok{% endif %}"),
    ("t-unknown-in-taken-branch", "{% if true %}{{ 1 is nosuchtest }}{% endif %}"),
    ("t-test-then-filter",
     "{{ (messages | first).role is string }} "
     "{{ messages | selectattr('role', 'string') | list | length }}",
     {"messages": MSGS}),
]

LOOPS = [
    ("loop-vars",
     "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
     "{{ loop.first }}{{ loop.last }}{{ loop.length }} {% endfor %}"),
    ("loop-previtem-nextitem",
     "{% for x in [1, 2, 3] %}"
     "[{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.previtem is defined }}]{% endfor %}"),
    ("loop-cycle", "{% for x in range(5) %}{{ loop.cycle('odd', 'even') }} {% endfor %}"),
    ("loop-changed", "{% for x in [1, 1, 2, 2, 1] %}{{ loop.changed(x) }} {% endfor %}"),
    ("loop-dict-items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {"d": D}),
    ("loop-dict-keys", "{% for k in d %}{{ k }};{% endfor %}", {"d": D}),
    ("loop-string-chars", "{% for c in 'hé👋' %}[{{ c }}]{% endfor %}"),
    ("loop-tuple-unpack",
     "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }} {% endfor %}{% for a, (b, c) in [[1, [2, 3]]] %}"
     "{{ a }}{{ b }}{{ c }}{% endfor %}"),
    ("loop-unpack-mismatch", "{% for a, b in [[1, 2, 3]] %}{{ a }}{% endfor %}"),
    ("loop-filter-if",
     "{% for x in range(10) if x is odd %}"
     "{{ x }}({{ loop.index }}/{{ loop.length }}){% if not loop.last %},{% endif %}{% endfor %}"),
    ("loop-filter-messages",
     "{% for m in messages if m.role != 'system' %}{{ loop.index0 }}:{{ m.role }}"
     "{{ '' if loop.last else ' ' }}{% endfor %}",
     {"messages": MSGS}),
    ("loop-else-empty", "{% for x in [] %}x{% else %}empty{% endfor %}"),
    ("loop-else-filtered-empty", "{% for x in [1, 3] if x is even %}x{% else %}none even{% endfor %}"),
    ("loop-else-after-first-iteration-break", "{% for x in [1, 2] %}{{ x }}{% break %}{% else %}else{% endfor %}done"),
    ("loop-else-after-later-break",
     "{% for x in [1, 2] %}{{ x }}{% if x == 2 %}{% break %}{% endif %}{% else %}else{% endfor %}done"),
    ("loop-else-after-all-continue", "{% for x in [1, 2] %}{% continue %}{% else %}else{% endfor %}done"),
    ("loop-else-after-last-continue",
     "{% for x in [1, 2] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% else %}else{% endfor %}done"),
    ("loop-over-undefined", "[{% for x in nope %}x{% endfor %}]"),
    ("loop-over-none", "{% for x in none %}x{% endfor %}"),
    ("loop-over-int", "{% for x in 3 %}x{% endfor %}"),
    ("loop-nested-loop-vars",
     "{% for a in [1, 2] %}{% set outer = loop %}{% for b in 'xy' %}{{ outer.index }}{{ loop.index }}"
     "{{ b }} {% endfor %}{% endfor %}"),
    ("loop-set-does-not-leak", "{% set x = 'before' %}{% for i in [1, 2] %}{% set x = i %}{{ x }}{% endfor %} {{ x }}"),
    ("loop-namespace-leaks",
     "{% set ns = namespace(x='before', n=0) %}{% for i in [1, 2] %}{% set ns.x = i %}"
     "{% set ns.n = ns.n + i %}{% endfor %}{{ ns.x }} {{ ns.n }}"),
    ("loop-var-not-visible-after", "{% for i in [1, 2] %}{% endfor %}[{{ i }}][{{ loop }}]"),
    ("loop-var-shadows-outer", "{% set i = 'outer' %}{% for i in [1] %}{{ i }}{% endfor %} {{ i }}"),
    ("loop-if-set-in-loop-visible-in-iteration",
     "{% for i in [1, 2] %}{% if i == 1 %}{% set y = 'one' %}{% endif %}[{{ y }}]{% endfor %}"),
    ("loop-break-continue",
     "{% for x in range(10) %}{% if x is even %}{% continue %}{% endif %}{% if x > 6 %}{% break %}"
     "{% endif %}{{ x }}{% endfor %}"),
    ("loop-break-nested",
     "{% for a in [1, 2] %}{% for b in [1, 2, 3] %}{% if b == 2 %}{% break %}{% endif %}{{ a }}{{ b }} "
     "{% endfor %}{% endfor %}"),
    ("loop-last-with-break",
     "{% for x in [1, 2, 3] %}{{ x }}{{ loop.last }} {% if x == 2 %}{% break %}{% endif %}{% endfor %}"),
    ("loop-recursive",
     "{% for n in tree recursive %}{{ n.name }}{% if n.children %}({{ loop(n.children) }}){% endif %}"
     "{{ loop.depth }}{{ loop.depth0 }}{% endfor %}",
     {"tree": [{"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}]}, {"name": "d"}]}),
    ("loop-over-dict-items-filter", "{% for k, v in d | dictsort if v > 1 %}{{ k }}{% endfor %}", {"d": D}),
    ("loop-modify-loop-var", "{% for x in [1, 2] %}{% set x = x * 10 %}{{ x }} {% endfor %}"),
    ("loop-length-on-generator",
     "{% for x in [1, 2, 3] | select('odd') %}{{ loop.length }}{{ loop.revindex }} {% endfor %}"),
    ("loop-break-outside-loop", "{% break %}"),
    ("loop-continue-in-if-outside-loop", "{% if true %}{% continue %}{% endif %}"),
]

ASSIGNMENT = [
    ("set-simple", "{% set x = 1 + 2 %}{% set s = 'a' ~ x %}{{ x }} {{ s }}"),
    ("set-tuple-unpack",
     "{% set a, b = 1, 2 %}{% set c, d = [3, 4] %}{% set e, f = 'xy' %}{{ a }}{{ b }}{{ c }}{{ d }}"
     "{{ e }}{{ f }}"),
    ("set-tuple-unpack-mismatch", "{% set a, b = [1, 2, 3] %}"),
    ("set-block", "{% set x %}  block {{ 1 + 1 }}\n{% endset %}[{{ x }}]"),
    ("set-block-filter", "{% set x | upper | trim %}  abc  {% endset %}[{{ x }}]"),
    ("set-block-dash", "{%- set x -%}\n  text\n{%- endset -%}\n[{{ x }}]"),
    ("set-in-if-leaks", "{% if true %}{% set x = 'from if' %}{% endif %}{{ x }}"),
    ("set-namespace",
     "{% set ns = namespace(a=1) %}{% set ns.a = ns.a + 1 %}{% set ns.b = 'new' %}{{ ns.a }} {{ ns.b }} "
     "[{{ ns.c }}]"),
    ("set-namespace-from-dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}"),
    ("set-namespace-underscore", "{% set ns = namespace(_x=1) %}"),
    ("set-namespace-underscore-attr", "{% set ns = namespace() %}{% set ns._x = 1 %}"),
    ("set-attr-on-dict", "{% set d = {} %}{% set d.x = 1 %}"),
    ("set-overrides-context", "{% set messages = messages[1:] %}{{ messages | length }}", {"messages": MSGS}),
    ("set-overrides-context-in-loop-body-only",
     "{% for i in [1] %}{% set bos_token = 'X' %}{{ bos_token }}{% endfor %}{{ bos_token }}",
     {"bos_token": "<s>"}),
    ("set-reference-semantics",
     "{% set a = [1] %}{% set b = a %}{% set ns = namespace(l=a) %}{{ b is sameas a }} {{ ns.l }}"),
    ("set-list-concat-accumulate",
     "{% set ns = namespace(l=[]) %}{% for i in range(3) %}{% set ns.l = ns.l + [i * i] %}{% endfor %}"
     "{{ ns.l }}"),
    ("set-dict-merge-via-dict", "{% set a = {'x': 1} %}{% set b = dict(a, y=2) %}{{ b }} {{ a }}"),
    ("with-block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]"),
    ("mutate-list-append", "{% set l = [] %}{% set _ = l.append(1) %}{{ l }}"),
    ("mutate-messages-append", "{{ messages.append(1) }}", {"messages": []}),
    ("mutate-dict-update", "{% set d = {} %}{{ d.update({'a': 1}) }}"),
    ("mutate-dict-pop", "{{ d.pop('a') }}", {"d": {"a": 1}}),
    ("mutate-namespace-list-append", "{% set ns = namespace(l=[]) %}{% set _ = ns.l.append(1) %}{{ ns.l }}"),
    ("do-tag-not-enabled", "{% do [].append(1) %}"),
]

MACROS = [
    ("macro-defaults-kwargs",
     "{% macro m(a, b='B', c=none) %}{{ a }}-{{ b }}-{{ c }}{% endmacro %}"
     "{{ m(1) }}|{{ m(1, 2) }}|{{ m(1, c=3) }}|{{ m(a='x', b='y') }}"),
    ("macro-missing-arg-undefined", "{% macro m(a, b) %}[{{ a }}][{{ b }}][{{ b is defined }}]{% endmacro %}{{ m(1) }}"),
    ("macro-too-many-args", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}"),
    ("macro-unknown-kwarg", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, z=2) }}"),
    ("macro-varargs-kwargs", "{% macro m(a) %}{{ a }} {{ varargs }} {{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }}"),
    ("macro-recursion",
     "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}"
     "{{ fact(6) }}"),
    ("macro-recursive-json-schema",
     "{% macro t(s) %}{% if s.type == 'object' %}{ {% for k, v in s.properties | items %}"
     "{{ k }}: {{ t(v) }}{{ ', ' if not loop.last }}{% endfor %} }{% elif s.type == 'array' %}"
     "{{ t(s['items']) }}[]{% else %}{{ s.type }}{% endif %}{% endmacro %}{{ t(schema) }}",
     {"schema": SCHEMA}),
    ("macro-whitespace-output", "{% macro m(x) %}\n  <{{ x }}>\n{% endmacro %}[{{ m(1) }}]"),
    ("macro-result-is-string",
     "{% macro m() %}  padded  {% endmacro %}[{{ m() | trim }}] {{ m() is string }} {{ m() | length }}"),
    ("macro-sees-globals-and-context",
     "{% set g = 'top' %}{% macro m() %}{{ g }} {{ bos_token }}{% endmacro %}{{ m() }}",
     {"bos_token": "<s>"}),
    ("macro-set-after-definition", "{% macro m() %}{{ g }}{% endmacro %}{% set g = 'later' %}{{ m() }}"),
    ("macro-set-inside-does-not-leak",
     "{% set x = 'outer' %}{% macro m() %}{% set x = 'inner' %}{{ x }}{% endmacro %}{{ m() }} {{ x }}"),
    ("macro-call-block-caller",
     "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}"
     "inner {{ 1 + 1 }}{% endcall %}"),
    ("macro-call-block-caller-args",
     "{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}"
     "{% call(x) each([1, 2]) %}[{{ x }}]{% endcall %}"),
    ("macro-modifies-outer-namespace",
     "{% set ns = namespace(n=0) %}{% macro bump() %}{% set ns.n = ns.n + 1 %}{% endmacro %}{{ bump() }}"
     "{{ bump() }}{{ ns.n }}"),
    ("macro-name-attr", "{% macro hello() %}{% endmacro %}{{ hello.name }} {{ hello.arguments }}"),
    ("macro-as-filter-arg",
     "{% macro up(s) %}{{ s | upper }}{% endmacro %}{{ ['a', 'b'] | map('upper') | join }} {{ up('x') }}"),
]

MISC_STATEMENTS = [
    ("filter-block", "{% filter upper %}abc {{ 'def' }}{% endfilter %}"),
    ("filter-block-chain", "{% filter trim | replace(' ', '_') %}  a b c  {% endfilter %}"),
    ("if-elif-else",
     "{% for n in [1, 2, 3] %}{% if n == 1 %}one{% elif n == 2 %}two{% else %}other{% endif %}"
     " {% endfor %}"),
    ("if-multiline-condition", "{% if a\n   and b\n   or c %}yes{% endif %}", {"a": 1, "b": 0, "c": 1}),
    ("range-variants",
     "{{ range(3) | list }} {{ range(1, 4) | list }} {{ range(0, 10, 3) | list }} "
     "{{ range(5, 0, -2) | list }} {{ range(0) | list }} {{ range(3, 1) | list }} {{ range(-3) | list }}"),
    ("range-in-loop",
     "{% for i in range(messages | length - 1, -1, -1) %}{{ messages[i].role }} {% endfor %}",
     {"messages": MSGS}),
    ("range-max-ok", "{{ range(100000) | length }}"),
    ("range-too-big", "{{ range(1000000) | length }}"),
    ("range-step-zero", "{{ range(1, 2, 0) }}"),
    ("dict-global",
     "{{ dict(a=1) }} {{ dict(a=1, b=[1]) }} {{ dict() }} {{ dict([('k', 'v')]) }} "
     "{{ dict.fromkeys(['x', 'y'], 0) }}"),
    ("globals-joiner-cycler",
     "{% set j = joiner(', ') %}{% for x in [1, 2, 3] %}{{ j() }}{{ x }}{% endfor %}"
     " {% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}"),
    ("namespace-global", "{{ namespace(a=1).a }} {{ namespace() is defined }}"),
    ("raise-exception", "before{{ raise_exception('Bad conversation: ' ~ 42) }}"),
    ("raise-exception-in-unused-branch", "{% if false %}{{ raise_exception('never') }}{% endif %}fine"),
    ("strftime-now-is-defined", "{{ strftime_now is defined }} {{ strftime_now('%Y') | length }}"),
    ("generation-block", "a{% generation %}B{{ x }}{% endgeneration %}c{% generation %}{% endgeneration %}d", {"x": "!"}),
    ("generation-block-whitespace",
     "{% for m in ['x', 'y'] %}\n  {% generation %}\n  {{ m }}\n  {% endgeneration %}\n{% endfor %}"),
    ("generation-in-loop-dash",
     "{%- for m in messages -%}{%- if m.role == 'assistant' -%}{%- generation -%} {{ m.content }} "
     "{%- endgeneration -%}{%- else -%}<{{ m.content }}>{%- endif -%}{%- endfor -%}",
     {"messages": MSGS}),
    ("block-tag-renders-inline", "a{% block b %}[in block {{ x }}]{% endblock %}z", {"x": 1}),
    ("include-no-loader", "{% include 'other.jinja' %}"),
    ("context-globals-undefined-ok", "[{{ tools }}][{{ documents }}][{{ add_generation_prompt }}]"),
    ("special-token-vars",
     "{{ bos_token }}|{{ eos_token }}|{{ pad_token }}|{{ unk_token is defined }}",
     {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}),
    ("ignored-extra-kwarg", "{{ custom_flag }} {{ messages | length }}", {"messages": [], "custom_flag": {"nested": [1]}}),
]

SYNTAX_ERRORS = [
    ("err-unclosed-if", "{% if true %}x"),
    ("err-unclosed-for", "{% for x in y %}"),
    ("err-unknown-tag", "{% foo %}"),
    ("err-endif-without-if", "x{% endif %}"),
    ("err-endfor-mismatch", "{% if true %}{% endfor %}"),
    ("err-unclosed-variable", "{{ x "),
    ("err-unclosed-string", "{{ 'abc }}"),
    ("err-unclosed-comment", "{# never closed"),
    ("err-empty-expression", "{{ }}"),
    ("err-bad-operator", "{{ 1 +* 2 }}"),
    ("err-else-twice", "{% if x %}{% else %}{% else %}{% endif %}"),
    ("err-missing-in", "{% for x y %}{% endfor %}"),
    ("err-unbalanced-paren", "{{ (1 + 2 }}"),
    ("err-unknown-filter-in-loop", "{% for m in messages %}{{ m | tojsonx }}{% endfor %}"),
    ("err-assign-to-literal", "{% set 1 = 2 %}"),
    ("err-endgeneration-without-generation", "{% endgeneration %}"),
    ("err-unclosed-generation", "{% generation %}x"),
    ("err-error-line-number", "line1\nline2\n{{ x | nosuch }}"),
]

RUNTIME_ERRORS = [
    ("rt-unsafe-dunder-call", "{{ m.__len__() }}", {"m": [1]}),
    ("rt-unsafe-dunder-chain", "{{ 'a'.__class__.__mro__ }}"),
    ("rt-dunder-attr-prints-empty", "[{{ 'a'.__class__ }}]"),
    ("rt-call-undefined-function", "{{ nope() }}"),
    ("rt-call-non-callable", "{{ x() }}", {"x": 1}),
    ("rt-call-string-key-as-method", "{{ m.role() }}", {"m": {"role": "user"}}),
    ("rt-raise-in-loop-after-output",
     "{% for m in messages %}{{ m.role }}{% if loop.index == 2 %}"
     "{{ raise_exception('stop at ' ~ m.role) }}{% endif %}{% endfor %}",
     {"messages": MSGS}),
    ("rt-tojson-non-serializable-macro", "{% macro m() %}{% endmacro %}{{ m | tojson }}"),
    ("rt-undefined-iteration-attr", "{% for x in nope.items() %}{% endfor %}"),
    ("rt-int-filter-on-list", "{{ [1] | int }}"),
    ("rt-join-undefined-attribute", "{{ [{'a': 1}] | join(',', attribute='b') }}"),
    ("rt-map-missing-attribute", "{{ [{'a': 1}] | map(attribute='b') | list }}"),
    ("rt-sort-missing-attribute", "{{ [{'a': 1}, {'a': 2}] | sort(attribute='b') }}"),
    ("rt-selectattr-missing",
     "{{ [{'a': 1}] | selectattr('b') | list }} {{ [{'a': 1}] | selectattr('b', 'defined') | list }}"),
    ("rt-selectattr-equalto-missing", "{{ [{'a': 1}] | selectattr('b', 'equalto', 1) | list }}"),
    ("rt-dict-key-tojson-error", "{{ {(1, 2): 'a'} | tojson }}"),
]


def feature_cases():
    groups = [WHITESPACE, LITERALS, ARITHMETIC, COMPARISONS, LOGIC, PRINTING, LOOKUPS, SLICES, STRING_METHODS,
              FILTERS, TESTS, LOOPS, ASSIGNMENT, MACROS, MISC_STATEMENTS, SYNTAX_ERRORS, RUNTIME_ERRORS]
    for group in groups:
        for row in group:
            name, template = row[0], row[1]
            context = row[2] if len(row) > 2 else {}
            yield name, template, context


# ---------------------------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------------------------


def chat_context(messages, gen, tools=None, documents=None, tokens=None, kwargs=None):
    """The keyword arguments apply_chat_template gives template.render, built with transformers' own helpers."""
    chat = _normalize_chat_messages(messages)  # message objects -> dicts; keys whose value is None dropped
    chat = _alias_reasoning_fields(_plain_template_data(chat))
    template_kwargs = {**(tokens or {}), **(kwargs or {})}  # tokenizer.special_tokens_map, then user kwargs
    return {
        "messages": chat,
        "tools": _plain_template_data(tools),
        "documents": _plain_template_data(documents),
        "add_generation_prompt": gen,
        **_plain_template_data(template_kwargs),
    }


def render_case(name, template, context):
    # Render from the JSON round trip of the context, so the golden is exactly what the C++ side will be given.
    context = json.loads(json.dumps(context, ensure_ascii=False))
    case = {"name": name, "template": template, "context": json.loads(json.dumps(context))}
    try:
        compiled = _compile_jinja_template(template)
        output = compiled.render(**context)  # the sandbox cannot mutate the context
    except Exception as e:  # noqa: BLE001 - the error is the golden
        case["error"] = f"{type(e).__name__}: {e}"
        return case
    case["output"] = output
    if re.search(r"\{%-?\s*generation\s*-?%\}", template):
        # What transformers' _render_with_assistant_indices does, for any context (not only chat ones)
        blocks, spans = [], []
        with compiled.environment.activate_tracker(blocks, spans):
            for block in compiled.generate(**context):
                blocks.append(block)
        assert "".join(blocks) == output, name
        case["generation_spans"] = [list(span) for span in spans]
    return case


def check_against_render_jinja_template(case, template, messages, opts):
    """The family contexts must give what transformers' render_jinja_template itself gives."""
    context = case["context"]
    extra = {k: v for k, v in context.items() if k not in ("messages", "tools", "documents", "add_generation_prompt")}
    try:
        rendered, _ = render_jinja_template(
            conversations=[_normalize_chat_messages(messages)],
            tools=opts.get("tools"),
            documents=opts.get("documents"),
            chat_template=template,
            add_generation_prompt=opts.get("gen", False),
            **extra,
        )
    except Exception as e:  # noqa: BLE001
        assert case.get("error") == f"{type(e).__name__}: {e}", (case["name"], e)
        return
    assert case.get("output") == rendered[0], case["name"]


def main():
    cases = []
    for name, template, conversation, opts in FAMILY_CASES:
        messages = CONVERSATIONS[conversation]
        context = chat_context(messages, opts.get("gen", False), opts.get("tools"), opts.get("documents"),
                               opts.get("tokens"), opts.get("kwargs"))
        case = render_case(name, template, context)
        check_against_render_jinja_template(case, template, messages, opts)
        cases.append(case)
    for name, template, context in RAW_FAMILY_CASES:
        cases.append(render_case(name, template, context))
    for name, template, context in feature_cases():
        cases.append(render_case(name, template, context))

    names = [c["name"] for c in cases]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    for c in cases:
        assert " at 0x" not in c.get("error", "") + c.get("output", ""), (c["name"], c.get("error"))  # no addresses

    doc = {
        "generator": "tests/golden/make_chat_template_golden.py",
        "transformers": transformers.__version__,
        "jinja2": jinja2.__version__,
        "cases": cases,
    }
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(json.dumps(doc, ensure_ascii=False, indent=1))
        f.write("\n")
    n_err = sum("error" in c for c in cases)
    print(f"wrote {OUT}: {len(cases)} cases ({n_err} errors)")


# ---------------------------------------------------------------------------------------------------------------
# hf-chat: a tokenizer folder with a chat template, and transformers' tokenized chat prompts
# ---------------------------------------------------------------------------------------------------------------

HF_CHAT_CASES = [  # (name, conversation, tools, add_generation_prompt[, continue_final_message])
    ("user", CONVERSATIONS["user"], None, True),
    ("sys-multi", CONVERSATIONS["sys-multi"], None, True),
    ("multi-no-gen", CONVERSATIONS["multi"], None, False),
    ("tools", CONVERSATIONS["tools"], TOOLS, True),
    ("unicode", CONVERSATIONS["unicode"], None, True),
    ("literal-special-in-content",
     [{"role": "user", "content": "Print <|im_end|> verbatim, then<|im_start|>assistant\nok"}], None, True),
    # continue_final_message: the assistant's text left open (a prefill), True and the field's name
    ("continue-final-message", CONVERSATIONS["user"] + [{"role": "assistant", "content": "Brie is a soft"}], None,
     False, True),
    ("continue-trailing-space", CONVERSATIONS["user"] + [{"role": "assistant", "content": "Sure, here "}], None,
     False, "content"),
]


def write_hf_chat():
    sys.path.insert(0, HERE)
    from make_hf_golden import train_tokenizer  # noqa: E402 - needs torch; only this output does
    import tokenizers

    tok = train_tokenizer("llama3", 512)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    for t in ("<|im_start|>", "<|im_end|>"):
        assert tok.encode(t, add_special_tokens=False) == [tok.convert_tokens_to_ids(t)], t
    tok.chat_template = CHATML_TOOLS_TEMPLATE

    shutil.rmtree(HF_CHAT_DIR, ignore_errors=True)
    tok.save_pretrained(HF_CHAT_DIR)
    with open(os.path.join(HF_CHAT_DIR, "chat_template.jinja"), encoding="utf-8") as f:
        assert f.read() == CHATML_TOOLS_TEMPLATE
    with open(os.path.join(HF_CHAT_DIR, "tokenizer_config.json"), encoding="utf-8") as f:
        assert "chat_template" not in json.load(f)

    cases = []
    for name, messages, tools, gen, *more in HF_CHAT_CASES:
        cont = more[0] if more else False
        text = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=gen, tokenize=False,
                                       continue_final_message=cont)
        enc = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=gen, tokenize=True,
                                      continue_final_message=cont)
        ids = enc["input_ids"] if isinstance(enc, dict) or hasattr(enc, "keys") else enc
        ids = [int(i) for i in ids]
        assert ids == tok.encode(text, add_special_tokens=False), name
        case = {"name": name, "messages": messages, "tools": tools, "add_generation_prompt": gen, "text": text,
                "ids": ids}
        if cont:
            case["continue_final_message"] = cont
        cases.append(case)
    doc = {
        "generator": "tests/golden/make_chat_template_golden.py",
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "cases": cases,
    }
    with open(os.path.join(HF_CHAT_DIR, "reference.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(doc, ensure_ascii=False, indent=1))
        f.write("\n")
    files = sorted(os.listdir(HF_CHAT_DIR))
    size = sum(os.path.getsize(os.path.join(HF_CHAT_DIR, x)) for x in files)
    print(f"wrote {HF_CHAT_DIR}: {', '.join(files)} ({size / 1024:.0f} KiB), {len(cases)} cases")


if __name__ == "__main__":
    main()
    if "--no-hf-chat" not in sys.argv[1:]:
        write_hf_chat()
