int q35_placeholder_quant;
